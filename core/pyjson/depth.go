package pyjson

// Depth returns how deeply the arrays and objects of the JSON text data
// nest: 0 for a scalar, 1 for [] or [1, 2], 2 for [[1]] or {"a": [1]}. It
// exists so that a stored value's nesting can be judged (limits.TooDeep)
// without parsing it: it allocates nothing and reads each byte once,
// skipping strings with their escapes. It does not check that data is
// JSON; on text that is not, the depth it returns means nothing.
func Depth[T string | []byte](data T) int {
	depth, deepest := 0, 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '[', '{':
			if depth++; depth > deepest {
				deepest = depth
			}
		case ']', '}':
			depth--
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		}
	}
	return deepest
}
