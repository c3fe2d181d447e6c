package gormstore

import (
	"context"
	"time"

	"gorm.io/gorm/logger"
)

// silent is the GORM logger of the store's own statements: it logs
// nothing. GORM's loggers print a statement with its values interpolated
// (the default one for every failed or slow statement), and the store's
// values are a response's headers and body, and hashes of keys and
// tenants that must not be correlated across logs either. Failures reach
// the caller as errors instead, which the Engine logs with the key's hash
// only. A taken key on MySQL, a failed INSERT, is then no log line either.
type silent struct{}

// LogMode implements logger.Interface.
func (silent) LogMode(logger.LogLevel) logger.Interface { return silent{} }

// Info implements logger.Interface.
func (silent) Info(context.Context, string, ...any) {}

// Warn implements logger.Interface.
func (silent) Warn(context.Context, string, ...any) {}

// Error implements logger.Interface.
func (silent) Error(context.Context, string, ...any) {}

// Trace implements logger.Interface.
func (silent) Trace(context.Context, time.Time, func() (string, int64), error) {}
