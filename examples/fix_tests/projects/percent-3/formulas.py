def share_percent(part, whole):
    return part / whole * 10
