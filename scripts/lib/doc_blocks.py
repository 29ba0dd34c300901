"""The command blocks of the operator's pages, read from the markdown and run as written.

A command block is a fenced block whose info string starts with `bash` (```` ```bash ````); a
second word names it (```` ```bash rollout-dry-run ````) for the test's steps before and after it.
A block the test cannot run says so in the page, in the last line before it:
`(Not run by scripts/chart test: <why>.)` — the reason is reported with the tally.

Blocks run in page order with `bash -euo pipefail`, in a working directory that stands for the
operator's (podsweep's `charts/` and Kyuubi's unpacked `apache-kyuubi-1.12.0/` beside the files a
page writes), with `helm`, `kubectl` and a kubeconfig of the local kube-apiserver."""

import re
import subprocess
import time

NOT_RUN = re.compile(r"\(Not run by `?scripts/chart test`?: (?P<why>[^)]*)\)")


class Block:
    def __init__(self, page, line, lang, name, text, not_run):
        self.page, self.line, self.lang, self.name, self.text, self.not_run = page, line, lang, name, text, not_run

    def where(self):
        return f"{self.page}:{self.line}" + (f" ({self.name})" if self.name else "")


def blocks(path, rel):
    """Every fenced block of a page whose language is bash, in order."""
    out = []
    with open(path) as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+)\s*(\S*)\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang, name = m.group(1), m.group(2), m.group(3), m.group(4)
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if lang != "bash":
            continue
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        why = NOT_RUN.search(prev)
        out.append(Block(rel, start + 1, lang, name, "\n".join(body) + "\n", why.group("why") if why else None))
    return out


def run(block, cwd, env, timeout=300):
    """Runs a block as written: (exit status, stdout, stderr, seconds)."""
    t0 = time.time()
    try:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=timeout)
        return r.returncode, r.stdout, r.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", f"timed out after {timeout} s", time.time() - t0
