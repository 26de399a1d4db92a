"""The asyncio face's transport: its server, shared connections, deadlines and fan-out."""
