"""Device check: detect the GPU and compare it with its wiki/hardware page.

Run on the device machine from the repository root:  python3 scripts/device/device_hw_check.py
Prints one row per cross-checked field and exits 1 when the device is unknown to the wiki
(no page lists its name) or when a detected value differs from the page.

It runs aka's own detect_device() + merge() when aka imports. The device image has torch and
pyyaml but (as of KINDS.md, 2026-11-17) no pydantic, so without a carried pydantic wheel it falls
back to the same exact-name match done here with torch and yaml alone, and says which path ran.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HEAD = ("field", "device", "page", "status")
# torch property -> page fact; the same pairs as aka.hardware.CROSS_CHECKED
PROPS = {
    "multi_processor_count": "sm_count",
    "L2_cache_size": "l2_bytes",
    "shared_memory_per_multiprocessor": "smem_per_sm_bytes",
    "shared_memory_per_block_optin": "smem_per_block_optin_bytes",
    "regs_per_multiprocessor": "regs_per_sm",
}


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


def with_aka():
    """(detected dict, page id, page facts {key: value}, names, reason) through aka itself."""
    from aka.hardware import detect_device, merge
    from aka.wiki import load_wiki

    pages = load_wiki(ROOT / "wiki")
    det = detect_device()
    hw = merge(det, pages)
    if det is None:
        return None, None, {}, [], hw.reason
    names = next((p.meta.names for p in pages if p.id == hw.page_id), [])
    return det.model_dump(), hw.page_id, {k: f.value for k, f in hw.facts.items()}, names, hw.reason


def without_aka():
    import torch
    import yaml

    if not torch.cuda.is_available():
        return None, None, {}, [], "no GPU: CUDA is not available on this machine"
    p = torch.cuda.get_device_properties(0)
    det = {"name": p.name, "capability": f"{p.major}.{p.minor}", "total_memory_bytes": p.total_memory}
    det.update({fact: getattr(p, prop, None) for prop, fact in PROPS.items()})
    for page in sorted((ROOT / "wiki" / "hardware").glob("*.md")):
        meta = yaml.safe_load(page.read_text().split("---")[1])
        if _norm(p.name) in {_norm(n) for n in meta.get("names", [])}:
            if meta.get("capability") != det["capability"]:
                return det, None, {}, [], f"page {meta['id']} says capability {meta.get('capability')}"
            facts = {k: v["value"] for k, v in (meta.get("facts") or {}).items()}
            return det, meta["id"], facts, meta["names"], f"matched wiki/hardware/{page.name} by name"
    return det, None, {}, [], f"unknown part '{p.name}': no wiki/hardware page lists this name"


def main() -> int:
    try:
        import pydantic  # noqa: F401

        path, (det, page_id, facts, names, reason) = "aka.hardware", with_aka()
    except ImportError:
        path, (det, page_id, facts, names, reason) = "fallback (no pydantic)", without_aka()
    print(f"path:   {path}")
    if det is None:
        print(f"UNKNOWN: {reason}")
        return 1
    print(f"device: {det['name']}  capability {det['capability']}  driver {det.get('driver') or '-'}")
    print(f"wiki:   {'page ' + page_id if page_id else 'UNKNOWN'} — {reason}")
    if page_id is None:
        return 1
    rows, bad = [("name", det["name"], " | ".join(names), "ok")], 0
    for key in PROPS.values():
        got, want = det.get(key), facts.get(key)
        if got is None:
            status = "not reported by this torch"
        elif want is None:
            status = "no page value"
        elif got == want:
            status = "ok"
        else:
            status, bad = "MISMATCH", bad + 1
        rows.append((key, str(got), "-" if want is None else str(want), status))
    width = [max(len(r[i]) for r in [HEAD, *rows]) for i in range(4)]
    for r in [HEAD, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, width)))
    if det.get("total_memory_bytes"):
        print(f"total memory: {det['total_memory_bytes'] / 2**30:.1f} GiB (page, as marketed: "
              f"{facts.get('memory_bytes', '-')} bytes)")
    print("RESULT:", "MISMATCH" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
