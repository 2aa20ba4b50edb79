def fence_length(w, h):
    return w + h
