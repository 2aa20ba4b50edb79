"""Text charts of readings."""


def temperature_chart(readings):
    """A bar chart of temperatures."""
    return '\n'.join('#' * int(r['temp']) for r in readings)


def rain_chart(readings):
    """A bar chart of rainfall."""
    return '\n'.join('~' * int(r.get('rain', 0)) for r in readings)
