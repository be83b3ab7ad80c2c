"""engrain's own reliability suite (issue 11): threads and ``AsyncEngine`` tasks sharing one
engine, processes sharing one store, lost-update races, kill -9 during writes, isolation of
look-alike users, and the export/import round trip, on SQLite and PostgreSQL.

Each test has a fast size, run by ``make test``, and a long one marked ``reliability``, run
by ``make test-reliability`` (``-s`` shows the counts each test prints)."""
