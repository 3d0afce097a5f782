package tracing

import (
	"context"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// OTLPConfig says where a silo program exports its spans.
type OTLPConfig struct {
	// Endpoint is the OTLP/gRPC receiver's URL (--otlp-endpoint):
	// http://host:4317 in the clear, https://host:4317 over TLS with the
	// system's roots. Empty: the standard environment decides
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT,
	// with the other OTEL_EXPORTER_OTLP_* variables: headers, certificate,
	// timeout); neither set: no export.
	Endpoint string
	// Instance names the silo in the spans' resource (service.instance.id).
	// The service is "agentsilo" unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES says otherwise.
	Instance string
}

// Enabled reports whether c, or the environment, asks for an export.
func (c OTLPConfig) Enabled() bool {
	return c.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// StartOTLP returns a tracer provider that batches spans to the OTLP/gRPC
// receiver c names, or nil if c.Enabled is false. It connects lazily: a
// receiver that is down costs dropped spans (the exporter logs them through
// OpenTelemetry's error handler), never a failed start or a slower call.
// The caller shuts the provider down to flush what is left.
func StartOTLP(ctx context.Context, c OTLPConfig) (*sdktrace.TracerProvider, error) {
	if !c.Enabled() {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" && p != "grpc" {
			return nil, errs.New(codes.InvalidArgument, "tracing: %s=%s: only grpc is supported", v, p)
		}
	}
	var opts []otlptracegrpc.Option
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errs.New(codes.InvalidArgument, "tracing: OTLP endpoint %q: want http://host:port or https://host:port", c.Endpoint)
		}
		opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "agentsilo")}
	if c.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", c.Instance))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, errs.New(codes.InvalidArgument, "tracing: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// DescribeOTLP says, for the startup log, where spans go.
func DescribeOTLP(c OTLPConfig) string {
	switch {
	case c.Endpoint != "":
		return c.Endpoint
	case os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		return strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) + " (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		return strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) + " (OTEL_EXPORTER_OTLP_ENDPOINT)"
	}
	return "off"
}
