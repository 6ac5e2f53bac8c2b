"""``int8conf gate``: may a candidate kernel replace an incumbent? See README.md in this folder."""
