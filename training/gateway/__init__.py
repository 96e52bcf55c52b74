"""The policy endpoint: an OpenAI-compatible server that records every turn, the engines that
sample behind it, and the parser that reads the student's tool calls out of its text."""
