"""Page templates for the wiki tests (valid as written; tests break them on purpose)."""

GOOD_TECHNIQUE = """---
id: {id}
kind: technique
title: A card
tags: [demo]
sources: ["a paper, 2024"]
---
## Mechanism
Something that takes 12 us.
"""

GOOD_HARDWARE = """---
id: {id}
kind: hardware
title: A part
arch: [sm_90]
names: ["{name}"]
capability: "9.0"
sources: ["a datasheet"]
facts:
  sm_count: {{value: 100, source: "the datasheet, page 2"}}
  l2_bytes: {{value: 1000, source: "the datasheet, page 3"}}
---
Body.
"""
