module github.com/idemkit/idemkit/adapters/fiber

go 1.26.0

require (
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/idemkit/idemkit v0.0.0
	github.com/idemkit/idemkit/adapters/internal/fasthttpcore v0.0.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/molecule-man/go-brrr v1.3.0 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.77.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	github.com/idemkit/idemkit => ../..
	github.com/idemkit/idemkit/adapters/internal/fasthttpcore => ../internal/fasthttpcore
)
