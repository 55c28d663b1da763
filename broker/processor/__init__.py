"""Protocol-agnostic broker logic: produce, consume, route, receipts, filters, validation."""
