"""The one tool schema the backend tests offer a model: rlide's `run_tests`, reduced to its command."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the project's tests.",
            "parameters": {"type": "object", "properties": {"test_command": {"type": "string"}}},
        },
    }
]
