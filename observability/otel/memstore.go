package idemotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idemkit/core/memstore"
)

// observeMemstore registers the instruments that read s.Stats: one call
// per collection serves them all.
func observeMemstore(meter metric.Meter, s *memstore.Store) error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit("{record}"), metric.WithDescription(desc))
		keep(err)
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(err)
		return c
	}
	records := gauge(MemstoreRecordsName,
		"Records the memory store holds, expired ones included until swept: what counts against its limit.")
	limit := gauge(MemstoreRecordsLimitName,
		"The memory store's bound (WithMaxRecords): at it, new keys are refused with 429 store-full.")
	batches := counter(MemstorePurgeBatchesName, "{batch}", "Purge batches the memory store ran.")
	deleted := counter(MemstorePurgeDeletedName, "{record}", "Expired records the memory store's purge batches deleted.")
	took, err := meter.Float64ObservableCounter(MemstorePurgeTimeName, metric.WithUnit("s"),
		metric.WithDescription("Time the memory store's purge batches took, in all."))
	keep(err)
	if len(errs) > 0 {
		return errs[0]
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := s.Stats()
		o.ObserveInt64(records, int64(st.Records))
		o.ObserveInt64(limit, int64(st.MaxRecords))
		o.ObserveInt64(batches, st.PurgeBatches)
		o.ObserveInt64(deleted, st.Purged)
		o.ObserveFloat64(took, st.PurgeTime.Seconds())
		return nil
	}, records, limit, batches, deleted, took)
	return err
}
