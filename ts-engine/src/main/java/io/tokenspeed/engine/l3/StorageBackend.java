package io.tokenspeed.engine.l3;

import io.tokenspeed.l3.redis.RedisStore;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import io.tokenspeed.l3.store.mooncake.MooncakeStore;
import io.tokenspeed.l3.store.mooncake.MooncakeStoreSettings;

/**
 * The L3 store a deployment selects ({@code --kvstore-storage-backend}) with its connection
 * settings; {@link #open()} makes the client.
 */
public sealed interface StorageBackend {

  /** The backend's name as the flag spells it. */
  String name();

  /** A new client for the store (not yet registered with any Host allocation). */
  Store open() throws Exception;

  /** In this process only: nothing survives it. */
  record Memory(MemoryStoreSettings settings) implements StorageBackend {
    @Override
    public String name() {
      return "memory";
    }

    @Override
    public Store open() {
      return new MemoryStore(settings);
    }
  }

  /** A directory: objects are files created by atomic rename, shared by processes. */
  record File(FileStoreSettings settings) implements StorageBackend {
    @Override
    public String name() {
      return "file";
    }

    @Override
    public Store open() throws Exception {
      return new FileStore(settings);
    }
  }

  /** Redis or Valkey, standalone or Cluster. */
  record Redis(RedisStoreSettings settings) implements StorageBackend {
    @Override
    public String name() {
      return "redis";
    }

    @Override
    public Store open() throws Exception {
      return RedisStore.open(settings);
    }
  }

  /** Mooncake Store through its C API (needs the native library and a master). */
  record Mooncake(MooncakeStoreSettings settings) implements StorageBackend {
    @Override
    public String name() {
      return "mooncake";
    }

    @Override
    public Store open() throws Exception {
      return MooncakeStore.open(settings);
    }
  }
}
