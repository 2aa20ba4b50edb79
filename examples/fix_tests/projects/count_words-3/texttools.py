def words_in(s):
    return len(s.split(','))
