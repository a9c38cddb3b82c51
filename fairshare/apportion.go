package fairshare

import (
	"math"
	"sort"
)

// apportionEps is the tolerance under which a quota is taken as the integer
// it rounds to: 0.1+0.2 or (1/3)·3 must not lose a seat to float rounding.
const apportionEps = 1e-9

// Apportion splits total over shares by the largest-remainder (Hamilton)
// method.
//
// shares are fractions of total that may sum to less than 1 (the rest stays
// unreserved). With q_i = share_i × total, each gets ⌊q_i⌋, then the seats
// left up to ⌊Σ q_i⌋ go one each to the largest fractional parts q_i − ⌊q_i⌋
// (ties: lower index first). Shares that sum to more than 1 are first
// normalised (share_i / Σ share). Negative, NaN and infinite shares count as
// 0. The result never sums to more than total (0 for total ≤ 0); quotas
// within 1e-9 of an integer are taken as that integer.
//
//	Apportion(256, {0.8125, 0.1875}) = {208, 48}
//	Apportion(10,  {0.8125, 0.1875}) = {8, 2}     (8.125, 1.875: the seat left goes to .875)
func Apportion(total int, shares []float64) []int {
	out := make([]int, len(shares))
	if total <= 0 || len(shares) == 0 {
		return out
	}
	clean := make([]float64, len(shares))
	sum := 0.0
	for i, s := range shares {
		if s > 0 && !math.IsInf(s, 0) {
			clean[i] = s
			sum += s
		}
	}
	if sum == 0 {
		return out
	}
	if sum > 1 {
		for i := range clean {
			clean[i] /= sum
		}
		sum = 1
	}
	T := float64(total)
	target := int(math.Floor(sum*T + apportionEps*float64(len(shares)+1)))
	target = min(target, total)
	frac := make([]float64, len(shares))
	given := 0
	for i, s := range clean {
		q := s * T
		f := math.Floor(q + apportionEps)
		out[i] = int(f)
		frac[i] = q - f
		given += out[i]
	}
	left := target - given
	if left <= 0 {
		return out
	}
	idx := make([]int, len(shares))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return frac[idx[a]] > frac[idx[b]] })
	for _, i := range idx {
		if left == 0 {
			break
		}
		if clean[i] == 0 {
			continue
		}
		out[i]++
		left--
	}
	return out
}

// normalise returns the shares as fractions of their parent: unchanged when
// they sum to at most 1 (configuration fractions such as 0.8125 / 0.1875,
// the rest unreserved), divided by their sum when it is more than 1 (Slurm
// integers such as 13 / 3 or 60 / 40). Negative and non-finite shares are 0.
func normalise(shares []float64) []float64 {
	out := make([]float64, len(shares))
	sum := 0.0
	for i, s := range shares {
		if s > 0 && !math.IsInf(s, 0) {
			out[i] = s
			sum += s
		}
	}
	if sum > 1 {
		for i := range out {
			out[i] /= sum
		}
	}
	return out
}
