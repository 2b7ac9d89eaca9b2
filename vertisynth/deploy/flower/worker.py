"""`python -m vertisynth.deploy.flower.worker RC_FILE CMD...`: run one party step (CMD, the ordinary CLI) and
write its exit status to RC_FILE atomically when it ends, so a later ClientApp process (not its parent) can tell
done from failed. Started by the bridge in a session of its own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    rc_file, cmd = Path(argv[0]), argv[1:]
    rc = subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode   # the step bounds its own waits (--timeout)
    tmp = rc_file.with_suffix(".part")
    tmp.write_text(str(rc))
    os.replace(tmp, rc_file)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
