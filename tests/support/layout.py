"""Dash layout trees in tests."""

from __future__ import annotations


def find(component, element_id: str):
    """The component with that id in a layout tree."""
    if getattr(component, "id", None) == element_id:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json"):
            found = find(child, element_id)
            if found is not None:
                return found
    return None
