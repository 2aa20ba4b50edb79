def percent(part, whole):
    return part / whole * 10
