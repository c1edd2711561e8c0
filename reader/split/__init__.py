"""Reading one split: a row-group range of a data file, deletes applied, as change rows."""
