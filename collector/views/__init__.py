"""Everything people read: report tables, the dashboard's query layer, evidence as text."""
