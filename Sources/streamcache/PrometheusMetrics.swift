import CoreMetrics
import Prometheus

/// `serve`'s metrics: the cache counts into a Prometheus registry of its own, which the control
/// API's `GET /api/metrics` renders.
struct PrometheusMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()

    /// The factory for ``StreamCache/Configuration/metricsFactory``.
    var factory: any MetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        // A cached read's first byte takes well under a millisecond and a seek to a cloud origin
        // tens to hundreds: the default buckets (5 ms to 10 s) would put every cached read in one.
        factory.durationHistogramBuckets["streamcache_first_byte_seconds"] = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(10),
        ]
        return factory
    }

    /// The registry's text exposition, for ``ProxyServer/Configuration/metricsExposition``.
    var exposition: @Sendable () -> [UInt8] {
        { [registry] in registry.emitToBuffer() }
    }
}
