module github.com/idemkit/idemkit/bench

go 1.26.0

replace (
	github.com/idemkit/idemkit => ../
	github.com/idemkit/idemkit/adapters/echo => ../adapters/echo
	github.com/idemkit/idemkit/adapters/fiber => ../adapters/fiber
	github.com/idemkit/idemkit/adapters/gin => ../adapters/gin
	github.com/idemkit/idemkit/stores/gorm => ../stores/gorm
)
