module github.com/idemkit/idemkit/internal/devtools

go 1.26.0

require golang.org/x/mod v0.43.0

require (
	github.com/prometheus/client_golang v1.24.1 // indirect
	github.com/prometheus/common v0.70.1 // indirect
	go.opentelemetry.io/collector/pdata v1.67.0 // indirect
)
