def as_percent(part, whole):
    return part / whole * 10
