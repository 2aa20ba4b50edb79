def rect_perimeter(w, h):
    return w + h
