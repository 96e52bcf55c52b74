"""What the recorders of live episodes share (the MCP server for an IDE agent, the policy endpoint for a
scaffold): capturing an episode's workspace (`capture`) and verifying it as it starts and ends
(`verification_hub`)."""
