"""Instructions per loop in the SASS of an NVIDIA OpenCL program's PTX.

    python benchmarks/sass_loops.py FILE.ptx [...] [--arch sm_90] [--min 40]

For each PTX file: assembled by ptxas, disassembled by nvdisasm (or cuobjdump
-sass), and for every loop (a backward branch) with at least --min
instructions, its length and instruction counts by opcode. The tools are
looked for on PATH, under /usr/local/cuda*/bin, and in the pip packages that
carry them (triton's backends/nvidia/bin, nvidia-cuda-nvcc / -nvdisasm /
-cuobjdump); `find_tools` says what it found. Used by probe_mucatherm.py on the
GPU machine and to read the PTX it brings back.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile


def _candidates(name):
    found = shutil.which(name)
    if found:
        yield found
    yield from sorted(glob.glob(f"/usr/local/cuda*/bin/{name}"))
    roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    for root in roots:
        if isinstance(root, str) and os.path.isdir(root):
            yield from sorted(glob.glob(os.path.join(root, "triton", "backends", "nvidia", "bin", name)))
            yield from sorted(glob.glob(os.path.join(root, "nvidia", "*", "bin", name)))


def find_tools() -> dict:
    """Paths of ptxas, nvdisasm and cuobjdump (None where not found)."""
    out = {}
    for name in ("ptxas", "nvdisasm", "cuobjdump"):
        out[name] = next((p for p in _candidates(name) if os.access(p, os.X_OK)), None)
    return out


def sass(ptx_text: str, tools: dict, arch: str = "sm_90") -> tuple[str, str]:
    """(disassembly, ptxas -v log) of one PTX module."""
    # NVIDIA's OpenCL PTX names '.target sm_90, texmode_independent' and may end in NULs
    ptx_text = ptx_text.replace("\x00", "").replace(", texmode_independent", "")
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as fh:
            fh.write(ptx_text)
        log = subprocess.run([tools["ptxas"], f"-arch={arch}", "-v", src, "-o", cubin],
                             capture_output=True, text=True, check=True).stderr
        if tools.get("nvdisasm"):
            dis = subprocess.run([tools["nvdisasm"], "-c", cubin], capture_output=True, text=True, check=True)
        else:
            env = dict(os.environ, PATH=os.path.dirname(tools["cuobjdump"]) + os.pathsep + os.environ["PATH"])
            dis = subprocess.run([tools["cuobjdump"], "-sass", cubin], capture_output=True, text=True,
                                 check=True, env=env)
    return dis.stdout, log


def loops(disassembly: str, minimum: int = 40) -> list[dict]:
    """Every loop (label .. backward branch to it) of at least `minimum`
    instructions: {"label", "instructions", "ops": {opcode: count}}."""
    lines, labels = [], {}
    for ln in disassembly.splitlines():
        m = re.match(r"^\s*(\.L_?x?_?\w+):", ln)
        if m:
            labels[m.group(1)] = len(lines)
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", ln)
        if m:
            lines.append(m.group(1).strip())
    out = []
    for i, ins in enumerate(lines):
        m = re.search(r"BRA\s+(?:\S+,\s*)?`\(([^)]+)\)", ins)
        if m and labels.get(m.group(1), len(lines)) <= i:
            body = lines[labels[m.group(1)]:i + 1]
            if len(body) >= minimum:
                ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", b).split()[0].split(".")[0]
                                          for b in body)
                out.append({"label": m.group(1), "instructions": len(body), "ops": dict(ops.most_common())})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ptx", nargs="+")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--min", type=int, default=40, help="shortest loop to report")
    args = p.parse_args(argv)
    tools = find_tools()
    if not tools["ptxas"] or not (tools["nvdisasm"] or tools["cuobjdump"]):
        print(f"no ptxas / nvdisasm: {tools}", file=sys.stderr)
        return 1
    for path in args.ptx:
        with open(path, errors="replace") as fh:
            dis, log = sass(fh.read(), tools, args.arch)
        regs = re.findall(r"Used (\d+) registers", log)
        for lp in loops(dis, args.min):
            print(json.dumps({"file": os.path.basename(path), "registers": int(regs[-1]) if regs else None,
                              **lp}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
