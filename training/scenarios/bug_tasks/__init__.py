"""Bug tasks in SWE-bench's instance format: the instance (`instance`), its repository archive
(`repo`), judging a candidate fix with the project's own tests (`judge`), the prompt (`prompt`) and
the generator that makes instances from a real library's sdist (`generate`). docs/bug-tasks.md."""
