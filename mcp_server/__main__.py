from mcp_server.cli.app import main

main()
