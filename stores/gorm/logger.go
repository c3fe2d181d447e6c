package gormstore

import (
	"context"
	"time"

	"gorm.io/gorm/logger"
)

// quietDuplicates passes GORM's log of the store's MySQL INSERT on to the
// user's logger, minus the duplicate-key error: there it only means that the
// key is taken, which is no error at all, and would otherwise be logged for
// every replay.
type quietDuplicates struct {
	logger.Interface
	isDuplicate func(error) bool
}

// LogMode implements logger.Interface.
func (l quietDuplicates) LogMode(level logger.LogLevel) logger.Interface {
	return quietDuplicates{l.Interface.LogMode(level), l.isDuplicate}
}

// Trace implements logger.Interface.
func (l quietDuplicates) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	if err != nil && l.isDuplicate(err) {
		err = nil
	}
	l.Interface.Trace(ctx, begin, fc, err)
}
