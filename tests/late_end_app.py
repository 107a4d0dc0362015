"""``app.py`` with a fault planted for tests/test_app_race.py: the event of a request whose text was generated (not
answered from the cache) ends ``LATE_END_S`` seconds after its finished text, as Gradio's end-of-event message can reach
a page late on a busy machine. Run as ``python tests/late_end_app.py`` with app.py's arguments."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import app  # noqa: E402
from lmswitch.webapp import steer  # noqa: E402

LATE_END_S = float(os.environ.get("LATE_END_S", "1.0"))
_streamed = steer._streamed


def late_end(items, session, stop):
    start = time.monotonic()
    yield from _streamed(items, session, stop)
    if time.monotonic() - start > 0.5:  # generated, not from the cache
        time.sleep(LATE_END_S)


steer._streamed = late_end
if __name__ == "__main__":
    sys.exit(app.main(sys.argv[1:]))
