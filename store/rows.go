package store

// scanRows reads every row of rows (a *sql.Rows or a pgx.Rows) with scan,
// which reads the current one, then checks rows.Err. It returns nil when
// there are no rows, and the first error as it is (the caller wraps it).
// The caller closes rows.
func scanRows[T any](rows interface {
	Next() bool
	Err() error
}, scan func() (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
