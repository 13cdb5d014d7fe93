// Package defaults fills a configuration's unset settings: the services' New functions each
// replaced a zero or negative number, or a nil clock, with their default, three lines a setting.
package defaults

import "time"

// Number is what Positive fills: counts, sizes and durations.
type Number interface {
	~int | ~int32 | ~int64 | ~float64
}

// Positive sets *v to d unless *v is above zero (zero and negative settings take the default).
func Positive[T Number](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Clock sets *now to time.Now when it is nil (a configuration's injectable clock).
func Clock(now *func() time.Time) {
	if *now == nil {
		*now = time.Now
	}
}
