// swift-tools-version: 6.0
import PackageDescription

/// `STREAMCACHE_SANITIZE=thread` builds this package's own targets under ThreadSanitizer and
/// leaves its dependencies as the plain debug build made them (3 minutes; CI's sanitizer run).
/// SwiftPM's `--sanitize` rebuilds every dependency, both copies of BoringSSL among them: a
/// second cold build of 12 minutes on a slow machine (docs/reliability.md, "ThreadSanitizer").
/// What is left uninstrumented is code with its own sanitizer runs upstream; locks and the
/// concurrency runtime's hand-overs are still seen, as the sanitizer intercepts them. Not for a package that depends on this one: SwiftPM refuses unsafe flags there.
let sanitizer = Context.environment["STREAMCACHE_SANITIZE"].flatMap { $0.isEmpty ? nil : $0 }
let sanitizerSwiftSettings: [SwiftSetting] = sanitizer.map { [.unsafeFlags(["-sanitize=\($0)"])] } ?? []
let sanitizerLinkerSettings: [LinkerSetting] = sanitizer.map { [.unsafeFlags(["-sanitize=\($0)"])] } ?? []

/// One settings array for every target (see STYLE.md §1): Swift 6 language mode is the default
/// for tools-version 6, so strict concurrency checking is on everywhere.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
] + sanitizerSwiftSettings

let package = Package(
    name: "StreamCache",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "StreamCache", targets: ["StreamCache"]),
        .library(name: "StreamCacheURLSession", targets: ["StreamCacheURLSession"]),
        .library(name: "StreamCacheHTTPClient", targets: ["StreamCacheHTTPClient"]),
        .library(name: "StreamCacheHLS", targets: ["StreamCacheHLS"]),
        .library(name: "StreamCacheServer", targets: ["StreamCacheServer"]),
        .library(name: "StreamCacheAVFoundation", targets: ["StreamCacheAVFoundation"]),
        .library(name: "StreamCacheSources", targets: ["StreamCacheSources"]),
        .executable(name: "streamcache", targets: ["streamcache"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        .target(
            name: "StreamCache",
            dependencies: [
                "CSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings,
            // Every executable and test links this target, and its linker settings with it.
            linkerSettings: sanitizerLinkerSettings
        ),
        // The system SQLite (Debian: libsqlite3-dev), read through the index's own small layer
        // (Store/SQLite/) rather than GRDB, which imports Foundation on Linux and with it
        // libFoundation, libFoundationInternationalization and ICU: 9 MiB of resident memory in
        // a server that needs none of them.
        .systemLibrary(
            name: "CSQLite",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        // URLSession lives outside the engine: on Linux FoundationNetworking loads libcurl and
        // some thirty libraries it links (6 MiB resident) into every process that imports it,
        // and the server and the CLI use AsyncHTTPClient instead.
        .target(
            name: "StreamCacheURLSession",
            dependencies: [
                "StreamCache",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StreamCacheHTTPClient",
            dependencies: [
                "StreamCache",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StreamCacheHLS",
            dependencies: ["StreamCache"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StreamCacheServer",
            dependencies: [
                "StreamCache",
                "StreamCacheHLS",
                "StreamCacheHTTPClient",
                // HummingbirdCore, not Hummingbird: see HTTPService.swift.
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StreamCacheSources",
            dependencies: [
                "StreamCache",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StreamCacheAVFoundation",
            dependencies: ["StreamCache", "StreamCacheURLSession"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "streamcache",
            dependencies: [
                "StreamCache",
                "StreamCacheSources",
                "StreamCacheHTTPClient",
                "StreamCacheHLS",
                "StreamCacheServer",
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "streamcache-bench",
            dependencies: [
                "StreamCache",
                "StreamCacheHTTPClient",
                "StreamCacheURLSession",
                "StreamCacheTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/streamcache-bench",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StreamCacheTestSupport",
            dependencies: [
                "StreamCache",
                "StreamCacheServer",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StreamCacheTests",
            dependencies: [
                "StreamCache",
                "StreamCacheURLSession",
                "StreamCacheHTTPClient",
                "StreamCacheServer",
                "StreamCacheTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StreamCacheHLSTests",
            dependencies: [
                "StreamCache",
                "StreamCacheURLSession",
                "StreamCacheHLS",
                "StreamCacheServer",
                "StreamCacheHTTPClient",
                "StreamCacheTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StreamCacheSourcesTests",
            dependencies: [
                "StreamCache",
                "StreamCacheURLSession",
                "StreamCacheSources",
                "StreamCacheServer",
                "StreamCacheHTTPClient",
                "StreamCacheTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StreamCacheAVFoundationTests",
            dependencies: [
                "StreamCache",
                "StreamCacheAVFoundation",
                "StreamCacheURLSession",
                "StreamCacheTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
