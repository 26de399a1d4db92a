"""A small TCP proxy that injects network faults between a client and Redis.

It runs an asyncio loop in a thread and forwards ``127.0.0.1:<port>`` to the target. Modes,
switchable at any time: added latency (each chunk is delayed), a reply blackhole (bytes from
Redis are dropped: the command runs, its reply never arrives, and neither does anything after
it on that connection, as on a stalled TCP stream), held requests (bytes to Redis
are kept back, as a partition behind the proxy keeps them in TCP's retransmission queue, and
delivered late by :meth:`FaultProxy.deliver_held`, even for a client that has gone), and reset
(every connection is closed at once).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from syncprims._embedded import free_port

__all__ = ["FaultProxy"]


class FaultProxy:
    """``127.0.0.1:<port>`` forwarding to ``target_port``, with switchable faults."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.latency = 0.0
        self.reply_latency = 0.0  # delay replies only (the command runs at once)
        self.blackhole = False
        self.drop_replies = 0  # drop this many reply chunks, then forward again
        self.hold_requests = 0  # hold back this many connections' requests, from their next
        # chunk on, every later one included (deliver_held sends them, in order)
        self._held: list[tuple[asyncio.StreamWriter, bytes]] = []
        self._holding: set[asyncio.StreamWriter] = set()  # connections with held bytes
        self._closing: set[asyncio.StreamWriter] = set()  # close once their held bytes are sent
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fault-proxy")
        self._thread.start()
        self._ready.wait(5)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            for writer in list(self._writers):
                writer.close()
            # Connections still piping end here, not as tasks destroyed with the loop.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer, replies=False),
            self._pipe(up_reader, writer, replies=True),
            return_exceptions=True,
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, replies: bool
    ) -> None:
        # Once a reply chunk was dropped, nothing more comes on this connection: TCP never
        # delivers later bytes after lost ones, and a client reading later replies would
        # pair them with the wrong commands (the multiplexed connection reads in order).
        stalled = False
        while True:
            data = await reader.read(65536)
            if not data:
                if any(w is writer for w, _ in self._held):
                    self._closing.add(writer)  # its held bytes still go out first
                    return
                writer.close()
                return
            if not replies and (self.hold_requests > 0 or writer in self._holding):
                # once a chunk of a connection is held, every later one of it is too, until
                # delivered: TCP never delivers later bytes of a stream before earlier ones
                # (a request passing a held one would be answered first, and a client that
                # pipelines pairs replies with requests in order)
                if writer not in self._holding:
                    self.hold_requests -= 1
                    self._holding.add(writer)
                self._held.append((writer, data))
                continue
            if self.latency:
                await asyncio.sleep(self.latency)
            if replies and self.reply_latency:
                await asyncio.sleep(self.reply_latency)
            if replies and (stalled or self.blackhole):
                stalled = True
                continue  # the command ran; its reply is lost, and so is all that follows
            if replies and self.drop_replies > 0:
                self.drop_replies -= 1
                stalled = True
                continue
            writer.write(data)
            await writer.drain()

    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(5)

    def deliver_held(self) -> int:
        """Send every held request chunk on to Redis, in order (a partition heals); the
        number sent."""
        sent: list[int] = []

        def deliver() -> None:
            held, self._held = self._held, []
            self._holding.clear()
            for writer, data in held:
                if not writer.is_closing():
                    writer.write(data)
            for writer in self._closing:
                writer.close()  # after the bytes written above
            self._closing.clear()
            sent.append(len(held))

        self._call(deliver)
        return sent[0] if sent else 0

    def reset(self) -> None:
        """Close every proxied connection at once (both sides see a reset/EOF)."""

        def close_all() -> None:
            for writer in list(self._writers):
                transport: Any = writer.transport
                transport.abort()
            self._writers.clear()

        self._call(close_all)

    def close(self) -> None:
        """Stop the proxy."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
