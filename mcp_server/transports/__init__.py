"""The MCP server's transports: stdio (`stdio`: every line checked before the SDK reads it) and
streamable HTTP (`http`: the app, its guard, the wire layer and the listener)."""
