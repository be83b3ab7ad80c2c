"""Many random bad calls of every public ``Engine`` method, built from the pieces of
``tests/test_facade_validation.py``'s hypothesis sweep (its valid call templates and junk
values): each call must succeed or raise an ``EngrainError`` (a ``ValidationError`` naming
the argument), a refused call must leave the export as it was, and no call for ada may
change bob's memories. Prints the outcomes and each broken case; exits 1 if any.

    PYTHONPATH=src .venv/bin/python bench/attacks/engine_bad_arguments.py CALLS [SEED]

(session 24, h3)"""

import collections
import random
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.simplefilter("ignore")
from engrain.errors import EngrainError, ValidationError  # noqa: E402
from tests import test_facade_validation as t  # noqa: E402

rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
junk = list(t.bad_scalars.elements)  # type: ignore[attr-defined]
tally = collections.Counter()
problems = collections.OrderedDict()
N = int(sys.argv[1])
tmp = Path(tempfile.mkdtemp(prefix="h3-drive-"))
for i in range(N):
    s = t._seed(tmp / str(i))
    calls = t._good_calls(s)
    method = rng.choice(sorted(calls))
    kwargs = dict(calls[method])
    args = sorted(set(kwargs) | (set(t.UPDATE_FIELDS) if method == "update" else set()))
    arg = rng.choice(args)
    good = kwargs.get(arg)
    r = rng.randrange(10)
    if r == 0:
        val = s.bob
    elif r == 1 and isinstance(good, list) and good:
        p = rng.randrange(len(good) + 1)
        val = [*good[:p], rng.choice(junk), *good[p:]]
    else:
        val = rng.choice(junk)
    kwargs[arg] = val
    before, bobs = t._export(s.engine), t._bob(s.engine)
    key = (method, arg, "10**5000" if isinstance(val, int) and val > 10**100 else repr(val)[:40])
    try:
        t._call(s.engine, "sync", method, kwargs)
        tally["ok"] += 1
        s.engine.wait()
        if method not in ("import_records", "ingest_conversations") and t._bob(s.engine) != bobs:
            problems[key] = "changed bob"
    except EngrainError as e:
        tally[type(e).__name__] += 1
        if isinstance(e, ValidationError) and not t._names_the_argument(e.message, arg):
            problems[key] = f"unnamed: {e.message[:150]}"
        s.engine.wait()
        if t._export(s.engine) != before:
            problems[key] = f"WROTE: {type(e).__name__} {e.message[:100]}"
    except Exception as e:
        tally["NOT ENGRAIN " + type(e).__name__] += 1
        problems[key] = f"{type(e).__name__}: {str(e)[:200]}"
    s.engine.close()
print(dict(tally))
for k, v in problems.items():
    print(k, "->", v)
sys.exit(1 if problems else 0)
