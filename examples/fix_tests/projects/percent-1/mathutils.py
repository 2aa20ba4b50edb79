def percentage(part, whole):
    return part / whole * 10
