"""Experiments that quantify the fixes suggested in docs/performance.md (not icetail code)."""
