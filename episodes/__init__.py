"""The episode log every part shares: record types, the store over SQLite or PostgreSQL, migrations,
redaction, and the policy turns and training runs kept in the same database."""
