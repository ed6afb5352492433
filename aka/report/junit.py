"""JUnit XML for `aka regress --junit`: the format Jenkins, GitLab and GitHub test reporters read.

One <testsuite> per op and kind (``aka.regress.<op>.correctness`` / ``.performance``), one <testcase>
per shape; a failing case carries <failure message=...>, a skipped one <skipped message=...>;
passing numbers go to the suite's <system-out>. The layout follows the Jenkins/Ant JUnit schema
(tests/report/junit.xsd, validated in the tests): <testsuite> needs name and tests, <testcase> a name.
"""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from aka.report.regress import RegressOutcome


def junit_xml(outcome: RegressOutcome, device: str = "") -> str:
    root = ET.Element("testsuites", name="aka regress", tests=str(len(outcome.cases)),
                      failures=str(sum(c.status == "fail" for c in outcome.cases)), errors="0")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    groups: dict[tuple[str, str], list] = {}
    for c in outcome.cases:
        groups.setdefault((c.op, c.kind), []).append(c)
    for i, ((op, kind), cases) in enumerate(groups.items()):
        suite = ET.SubElement(root, "testsuite", name=f"aka.regress.{op}.{kind}", tests=str(len(cases)),
                              failures=str(sum(c.status == "fail" for c in cases)), errors="0",
                              skipped=str(sum(c.status == "skipped" for c in cases)), time="0",
                              timestamp=stamp, hostname=socket.gethostname() or "localhost", id=str(i),
                              package=f"aka.regress.{op}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="device", value=device)
        ET.SubElement(props, "property", name="threshold", value=f"{outcome.threshold:g}")
        for c in cases:
            case = ET.SubElement(suite, "testcase", name=f"{op}[{c.shape}]", classname=f"aka.regress.{op}.{kind}",
                                 time="0")
            if c.status == "fail":
                ET.SubElement(case, "failure", message=c.message or "failed", type=f"{kind}-regression").text = (
                    c.message)
            elif c.status == "skipped":
                ET.SubElement(case, "skipped", message=c.message or "skipped")
        # Passing cases' numbers go to the suite's output: Ant's schema has no <system-out> per testcase.
        ET.SubElement(suite, "system-out").text = "\n".join(
            f"{c.shape}: {c.message}" for c in cases if c.status == "pass" and c.message)
        ET.SubElement(suite, "system-err").text = ""
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: Path, outcome: RegressOutcome, device: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(outcome, device))
    return path
