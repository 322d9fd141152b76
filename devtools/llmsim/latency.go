package llmsim

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// z99 is the standard normal distribution's 99th percentile.
const z99 = 2.3263

// maxLatency caps one drawn latency, so a far tail draw stays a long call
// rather than an overflow.
const maxLatency = time.Hour

// logNormal returns the latency at the standard normal draw z of the
// log-normal distribution whose median is median and whose 99th percentile
// is p99: exp(mu + sigma*z) with mu = ln(median) and sigma = (ln(p99) -
// ln(median)) / 2.3263. A p99 at or below the median gives sigma 0 (always
// the median). The result is capped at one hour; a median <= 0 gives 0.
func logNormal(median, p99 time.Duration, z float64) time.Duration {
	if median <= 0 {
		return 0
	}
	mu := math.Log(float64(median))
	sigma := 0.0
	if p99 > median {
		sigma = (math.Log(float64(p99)) - mu) / z99
	}
	d := math.Exp(mu + sigma*z)
	if d >= float64(maxLatency) {
		return maxLatency
	}
	return time.Duration(d)
}

// latency draws one call's latency from rng: log-normal when LatencyMedian
// is set, else uniform in [0.5, 1.5] × Latency, else 0.
func (s *Server) latency(rng *rand.Rand) time.Duration {
	switch {
	case s.cfg.LatencyMedian > 0:
		return logNormal(s.cfg.LatencyMedian, s.cfg.LatencyP99, rng.NormFloat64())
	case s.cfg.Latency > 0:
		return time.Duration(float64(s.cfg.Latency) * (0.5 + rng.Float64()))
	}
	return 0
}

// sleep waits the simulated latency of try number try of the request whose
// body hashes to digest. It returns ctx's error when the caller goes away
// first.
func (s *Server) sleep(ctx context.Context, digest [32]byte, try uint32) error {
	if s.cfg.LatencyMedian <= 0 && s.cfg.Latency <= 0 {
		return nil
	}
	d := s.latency(s.tryRand(digest, try, "latency"))
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
