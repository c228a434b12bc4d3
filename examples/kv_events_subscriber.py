#!/usr/bin/env python3
"""A subscriber of KV cache events in vLLM's wire format (pyzmq and msgpack only).

It reads what vLLM's ZmqEventPublisher sends, as vLLM documents it:

  * a ZeroMQ SUB socket receives multipart messages [topic, seq, payload]: seq is the batch's
    sequence number as 8 big-endian bytes, payload one msgpack EventBatch;
  * an EventBatch in the array form is [ts, [event, ...], data_parallel_rank];
  * each event is a tagged array:
      ["BlockStored", [block_hash, ...], parent_block_hash | None, [token_id, ...], block_size,
       lora_id | None, medium | None, ...]
      ["BlockRemoved", [block_hash, ...], medium | None, ...]
      ["AllBlocksCleared"]
  * a replay socket (ROUTER) takes a request carrying the first wanted sequence number as 8
    big-endian bytes and answers [seq, payload] for each batch it still holds from there, then
    [-1 as 8 bytes, b""].

Every message is checked strictly against that shape. Sequence numbers must run 0, 1, 2, ...: a
gap (a batch the live socket missed) is filled from the replay socket. With --verify-hashes, each
BlockStored hash is recomputed from its tokens as the first 8 bytes (big-endian) of the chained
SHA-256 page hash (docs/kv-events.md): u32le(len(prev)) || prev || u32le(P) || tokens as u32le.

Commands on stdin, one per line (for tests driving it): "pause" closes the SUB socket, "resume"
opens a new one, "sync" catches up through the replay socket, "finish" catches up and prints a
JSON summary on stdout, then exits. Without stdin commands it runs until interrupted.

Usage:
  kv_events_subscriber.py --discovery http://HOST:PORT/kv-events [--verify-hashes]
  kv_events_subscriber.py --endpoint tcp://HOST:5557 [--replay tcp://HOST:5558] [--topic T]
"""

import argparse
import hashlib
import json
import struct
import sys
import time
import urllib.request

import msgpack
import zmq

END_SEQ = -1


def seq_of(frame):
    if len(frame) != 8:
        raise ValueError("sequence frame of %d bytes, not 8" % len(frame))
    return int.from_bytes(frame, "big", signed=True)


class Subscriber:
    def __init__(self, endpoint, replay, topic, block_size, dp_rank, verify):
        self.ctx = zmq.Context()
        self.endpoint = endpoint
        self.replay_endpoint = replay
        self.topic = topic
        self.block_size = block_size
        self.dp_rank = dp_rank
        self.verify = verify
        self.sub = None
        self.replay = None
        self.expected = 0  # the next sequence number to apply
        self.batches = 0
        self.live_batches = 0
        self.replayed_batches = 0
        self.duplicates = 0
        self.gaps = []  # {"from", "to", "filled"}
        self.errors = []
        self.events = {"BlockStored": {}, "BlockRemoved": {}, "AllBlocksCleared": 0}
        self.held = {}  # medium -> set of hashes
        self.ever_stored = set()
        self.chain_breaks = []
        self.removed_unknown = 0
        self.cleared_at = []
        self.digests = {}  # hash -> full SHA-256 page digest (for verifying children)
        self.hash_checks = {"verified": 0, "mismatched": 0, "unverifiable": 0}
        self.open_sub()

    # ------------------------------------------------------------------ sockets

    def open_sub(self):
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode("utf-8"))
        self.sub.connect(self.endpoint)

    def close_sub(self):
        self.sub.close(linger=0)
        self.sub = None

    def replay_from(self, start, until=None):
        """Asks the replay socket for every batch from start; applies those not seen yet."""
        if self.replay_endpoint is None:
            return 0
        if self.replay is None:
            # a DEALER, so that one request may take many replies: it sends the empty delimiter
            # a REQ socket would add
            self.replay = self.ctx.socket(zmq.DEALER)
            self.replay.connect(self.replay_endpoint)
        self.replay.send_multipart([b"", start.to_bytes(8, "big")])
        got = 0
        deadline = time.monotonic() + 10
        while True:
            if not self.replay.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                self.errors.append("replay from %d: no end marker within 10 s" % start)
                return got
            frames = self.replay.recv_multipart()
            if len(frames) != 3 or frames[0] != b"":
                self.errors.append("replay answer of %d frames" % len(frames))
                continue
            seq = seq_of(frames[1])
            if seq == END_SEQ:
                if frames[2] != b"":
                    self.errors.append("replay end marker with a payload")
                return got
            if seq < self.expected:
                continue
            if seq != self.expected:
                self.errors.append("replay skipped from %d to %d" % (self.expected, seq))
            self.apply(seq, frames[2])
            self.replayed_batches += 1
            got += 1

    # ------------------------------------------------------------------ live

    def on_live(self, frames):
        if len(frames) != 3:
            self.errors.append("live message of %d frames" % len(frames))
            return
        topic, seq_frame, payload = frames
        if topic != self.topic.encode("utf-8"):
            self.errors.append("topic %r" % topic)
        seq = seq_of(seq_frame)
        self.live_batches += 1
        if seq < self.expected:
            self.duplicates += 1
            return
        if seq > self.expected:
            first = self.expected
            filled = self.replay_from(first)
            self.gaps.append({"from": first, "to": seq - 1, "filled": filled})
            if seq < self.expected:
                self.duplicates += 1
                return
        if seq != self.expected:
            self.errors.append("gap %d..%d was not filled" % (self.expected, seq - 1))
            self.expected = seq
        self.apply(seq, payload)

    # ------------------------------------------------------------------ decoding

    def apply(self, seq, payload):
        self.expected = seq + 1
        self.batches += 1
        try:
            batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception as e:  # noqa: BLE001 - any decoding failure is a finding
            self.errors.append("seq %d: not msgpack: %s" % (seq, e))
            return
        if not isinstance(batch, list) or len(batch) not in (2, 3):
            self.errors.append("seq %d: an EventBatch is [ts, events, dp_rank]: %r" % (seq, batch))
            return
        ts, events = batch[0], batch[1]
        if not isinstance(ts, float):
            self.errors.append("seq %d: ts %r is not a float" % (seq, ts))
        if len(batch) == 3 and self.dp_rank is not None and batch[2] != self.dp_rank:
            self.errors.append("seq %d: dp_rank %r, not %r" % (seq, batch[2], self.dp_rank))
        if not isinstance(events, list):
            self.errors.append("seq %d: events %r is not a list" % (seq, events))
            return
        for i, event in enumerate(events):
            try:
                self.apply_event(seq, event)
            except Exception as e:  # noqa: BLE001
                self.errors.append("seq %d event %d: %s: %r" % (seq, i, e, event))

    def apply_event(self, seq, event):
        if not isinstance(event, list) or not event or not isinstance(event[0], str):
            raise ValueError("not a tagged array")
        tag = event[0]
        if tag == "BlockStored":
            if len(event) < 6:
                raise ValueError("BlockStored of %d fields" % len(event))
            hashes, parent, tokens, block_size, lora_id = event[1:6]
            medium = event[6] if len(event) > 6 else None
            medium = "GPU" if medium is None else medium
            if not isinstance(hashes, list) or not hashes or not all(
                isinstance(h, int) and 0 <= h < 2**64 for h in hashes
            ):
                raise ValueError("block_hashes are not unsigned 64-bit integers")
            if parent is not None and not (isinstance(parent, int) and 0 <= parent < 2**64):
                raise ValueError("parent_block_hash %r" % (parent,))
            if not isinstance(block_size, int) or block_size <= 0:
                raise ValueError("block_size %r" % (block_size,))
            if self.block_size is not None and block_size != self.block_size:
                raise ValueError("block_size %d, not %d" % (block_size, self.block_size))
            if not isinstance(tokens, list) or len(tokens) != len(hashes) * block_size:
                raise ValueError("%d token ids for %d blocks" % (len(tokens), len(hashes)))
            if lora_id is not None:
                raise ValueError("lora_id %r" % (lora_id,))
            if not isinstance(medium, str):
                raise ValueError("medium %r" % (medium,))
            if parent is not None and parent not in self.ever_stored:
                self.chain_breaks.append({"seq": seq, "parent": parent})
            prev = parent
            for k, h in enumerate(hashes):
                if self.verify:
                    self.check_hash(h, prev, tokens[k * block_size : (k + 1) * block_size])
                self.ever_stored.add(h)
                self.held.setdefault(medium, set()).add(h)
                prev = h
            count = self.events["BlockStored"]
            count[medium] = count.get(medium, 0) + 1
        elif tag == "BlockRemoved":
            if len(event) < 2:
                raise ValueError("BlockRemoved of %d fields" % len(event))
            hashes = event[1]
            medium = event[2] if len(event) > 2 else None
            medium = "GPU" if medium is None else medium
            if not isinstance(hashes, list) or not all(
                isinstance(h, int) and 0 <= h < 2**64 for h in hashes
            ):
                raise ValueError("block_hashes are not unsigned 64-bit integers")
            held = self.held.setdefault(medium, set())
            for h in hashes:
                if h in held:
                    held.remove(h)
                else:
                    self.removed_unknown += 1
            count = self.events["BlockRemoved"]
            count[medium] = count.get(medium, 0) + 1
        elif tag == "AllBlocksCleared":
            self.events["AllBlocksCleared"] += 1
            self.cleared_at.append(seq)
            for held in self.held.values():
                held.clear()
        else:
            raise ValueError("unknown tag %r" % tag)

    def check_hash(self, h, parent, tokens):
        if parent is None:
            prev = b""
        elif parent in self.digests:
            prev = self.digests[parent]
        else:
            self.hash_checks["unverifiable"] += 1
            return
        data = struct.pack("<I", len(prev)) + prev + struct.pack("<I", len(tokens))
        data += struct.pack("<%dI" % len(tokens), *tokens)
        digest = hashlib.sha256(data).digest()
        if int.from_bytes(digest[:8], "big") == h:
            self.hash_checks["verified"] += 1
            self.digests[h] = digest
        else:
            self.hash_checks["mismatched"] += 1

    # ------------------------------------------------------------------ summary

    def summary(self):
        return {
            "batches": self.batches,
            "next_seq": self.expected,
            "live_batches": self.live_batches,
            "replayed_batches": self.replayed_batches,
            "duplicates": self.duplicates,
            "gaps": self.gaps,
            "errors": self.errors,
            "events": self.events,
            "held": {m: len(s) for m, s in sorted(self.held.items())},
            "chain_breaks": self.chain_breaks,
            "removed_unknown": self.removed_unknown,
            "cleared_at": self.cleared_at,
            "hash_checks": self.hash_checks,
        }


def say(line):
    print(line, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--discovery", help="GET /kv-events of a server: endpoints, topic, block size")
    ap.add_argument("--endpoint", help="the PUB endpoint, tcp://HOST:PORT")
    ap.add_argument("--replay", help="the replay endpoint, tcp://HOST:PORT")
    ap.add_argument("--topic", default="")
    ap.add_argument("--block-size", type=int)
    ap.add_argument("--verify-hashes", action="store_true")
    ap.add_argument("--print-events", action="store_true",
                    help="print each batch's events as they arrive (Ctrl-C prints the summary)")
    args = ap.parse_args()
    endpoint, replay, topic, block_size, dp_rank = (
        args.endpoint, args.replay, args.topic, args.block_size, None)
    if args.discovery:
        with urllib.request.urlopen(args.discovery, timeout=10) as r:
            d = json.load(r)
        endpoint = d["endpoint"]
        replay = d.get("replay_endpoint")
        topic = d["topic"]
        block_size = d["block_size"]
        dp_rank = d["dp_rank"]
    if endpoint is None:
        ap.error("give --discovery or --endpoint")
    s = Subscriber(endpoint, replay, topic, block_size, dp_rank, args.verify_hashes)
    poller = zmq.Poller()
    poller.register(s.sub, zmq.POLLIN)
    stdin_open = True
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    say("subscribed %s topic %r replay %s" % (endpoint, topic, replay))
    try:
        return serve(s, poller, stdin_open, args.print_events)
    except KeyboardInterrupt:
        say(json.dumps(s.summary(), sort_keys=True))
        return 0


def describe(payload):
    """One line per event of a batch, for --print-events."""
    lines = []
    for e in msgpack.unpackb(payload, raw=False, strict_map_key=False)[1]:
        if e[0] == "BlockStored":
            lines.append("  BlockStored %s %d blocks, first %016x" % (
                e[6] if len(e) > 6 else None, len(e[1]), e[1][0] if e[1] else 0))
        elif e[0] == "BlockRemoved":
            lines.append("  BlockRemoved %s %d blocks" % (e[2] if len(e) > 2 else None, len(e[1])))
        else:
            lines.append("  " + str(e[0]))
    return lines


def serve(s, poller, stdin_open, print_events):
    while True:
        ready = dict(poller.poll(1000))
        if s.sub is not None and ready.get(s.sub):
            frames = s.sub.recv_multipart()
            s.on_live(frames)
            if print_events and len(frames) == 3:
                say("batch %d" % seq_of(frames[1]))
                for line in describe(frames[2]):
                    say(line)
            continue
        if stdin_open and ready.get(sys.stdin.fileno()):
            line = sys.stdin.readline()
            if not line:
                poller.unregister(sys.stdin.fileno())
                stdin_open = False
                continue
            command = line.strip()
            if command == "pause":
                poller.unregister(s.sub)
                s.close_sub()
                say("paused at %d" % s.expected)
            elif command == "resume":
                s.open_sub()
                poller.register(s.sub, zmq.POLLIN)
                say("resumed at %d" % s.expected)
            elif command == "sync":
                s.replay_from(s.expected)
                say("synced %d" % s.expected)
            elif command == "finish":
                while s.sub is not None and s.sub.poll(200):
                    s.on_live(s.sub.recv_multipart())
                s.replay_from(s.expected)
                say(json.dumps(s.summary(), sort_keys=True))
                return 0
            elif command:
                say("unknown command %r" % command)


if __name__ == "__main__":
    sys.exit(main())
