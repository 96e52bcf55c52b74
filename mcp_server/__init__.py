"""The front door: the MCP server (tools, the recording middleware, transports, settings) and the
`rlide` command line (`cli/`)."""
