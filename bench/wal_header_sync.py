"""Which commits of a synchronous=NORMAL connection call fsync/fdatasync: the first one
after a RESTART checkpoint (SQLite syncs the WAL header when the log is reused)."""
import os, sqlite3, sys, tempfile
d = tempfile.mkdtemp(dir="/tmp/h9-work")
path = os.path.join(d, "x.db")
w = sqlite3.connect(path, isolation_level=None)
w.execute("PRAGMA journal_mode=WAL"); w.execute("PRAGMA wal_autocheckpoint=0"); w.execute("PRAGMA synchronous=NORMAL")
w.execute("CREATE TABLE t(b BLOB)")
c = sqlite3.connect(path, isolation_level=None, timeout=0)
def mark(s): os.write(2, f"=== {s}\n".encode())  # visible in strace as write(2, ...)
for i in range(3):
    mark(f"commit {i} appending"); w.execute("INSERT INTO t VALUES(randomblob(3000))")
mark("restart"); print(c.execute("PRAGMA wal_checkpoint(RESTART)").fetchone(), file=sys.stderr)
for i in range(3):
    mark(f"commit {i} after restart"); w.execute("INSERT INTO t VALUES(randomblob(3000))")
