"""The MCP tools, one module per group: episodes, execution, search, training status."""
