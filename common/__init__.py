"""Helpers with no domain knowledge that any rlide package may import (SQLite WAL set-up, HTTP
bearer auth); it imports none of the project's packages."""
