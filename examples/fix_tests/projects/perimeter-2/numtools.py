def border_length(w, h):
    return w + h
