module github.com/idemkit/idemkit/adapters/fiberv3

go 1.26.0

require (
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/idemkit/idemkit v0.0.0
	github.com/idemkit/idemkit/adapters/internal/fasthttpcore v0.0.0
)

require (
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/molecule-man/go-brrr v1.3.0 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.77.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace (
	github.com/idemkit/idemkit => ../..
	github.com/idemkit/idemkit/adapters/internal/fasthttpcore => ../internal/fasthttpcore
)
