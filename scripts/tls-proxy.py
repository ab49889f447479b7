#!/usr/bin/env python3
"""A TLS terminator for tests: TaskServer has no TLS of its own, so a test puts this in front.

    tls-proxy.py CERT KEY BACKEND_PORT

Listens on 127.0.0.1 at a port the kernel picks and prints that port on stdout (one line), then
accepts TLS connections (CERT and KEY in PEM) and pipes each one's plaintext, both ways, to its
own TCP connection to 127.0.0.1:BACKEND_PORT. Each accepted connection is logged on stderr as
`connection N`, so that a test can count them (keep-alive shows as few connections for many
requests). Runs until killed. Standard library only.
"""
import asyncio
import ssl
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def main():
    cert, key, backend = sys.argv[1], sys.argv[2], int(sys.argv[3])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    count = 0

    async def handle(client_reader, client_writer):
        nonlocal count
        count += 1
        print(f"connection {count}", file=sys.stderr, flush=True)
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", backend)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
