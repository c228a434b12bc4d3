/**
 * Chat templates: a conversation of {@link io.tokenspeed.server.chat.ChatMessage}s rendered into
 * the prompt text of a checkpoint by its Jinja template, as Hugging Face {@code transformers}
 * renders it ({@link io.tokenspeed.server.chat.ChatTemplate}), within {@link
 * io.tokenspeed.server.chat.ChatTemplateLimits}; failures are {@link
 * io.tokenspeed.server.chat.ChatTemplateException}s. {@code docs/chat-templates.md} describes the
 * supported subset of Jinja.
 */
package io.tokenspeed.server.chat;
