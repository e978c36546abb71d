# ruff: noqa: E501
"""The Nsight Systems SQLite export schema the nsys writer reproduces, verbatim.

Each ``CREATE TABLE`` text is the one ``sqlite_master`` holds in a real export: Nsight Systems
2026.2.1 (export schema 3.25.0), except ``TARGET_INFO_GPU`` and ``TARGET_INFO_CUDA_DEVICE``, which
that export lacks and come from a 2026.1.1 export (schema 3.24.14). The enum tables' rows are
those the same exports hold.
"""

from __future__ import annotations

EXPORT_SCHEMA_VERSION = "3.25.0"
EXPORT_PRODUCT_VERSION = "2026.2.1.210"

TABLES: dict[str, str] = {}

TABLES["META_DATA_EXPORT"] = """CREATE TABLE META_DATA_EXPORT (
    -- information about nsys export process

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)"""

TABLES["META_DATA_CAPTURE"] = """CREATE TABLE META_DATA_CAPTURE (
    -- information about nsys capture parameters

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)"""

TABLES["StringIds"] = """CREATE TABLE StringIds (
    -- Consolidation of repetitive string values.

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- ID reference value.
    value                       TEXT      NOT NULL                     -- String value.
)"""

TABLES["PROCESSES"] = """CREATE TABLE PROCESSES (
    -- Names and identifiers of processes captured in the report.

    globalPid                   INTEGER,                               -- Serialized GlobalId.
    pid                         INTEGER,                               -- The process ID.
    name                        TEXT                                   -- The process name.
)"""

TABLES["ThreadNames"] = """CREATE TABLE ThreadNames (
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Thread name
    priority                    INTEGER,                               -- Priority of the thread.
    globalTid                   INTEGER                                -- Serialized GlobalId.
)"""

TABLES["TARGET_INFO_SYSTEM_ENV"] = """CREATE TABLE TARGET_INFO_SYSTEM_ENV (
    globalVid                   INTEGER,                               -- Serialized GlobalId.
    devStateName                TEXT      NOT NULL,                    -- Device state name.
    name                        TEXT      NOT NULL,                    -- Property name.
    nameEnum                    INTEGER   NOT NULL,                    -- Property enum value.
    value                       TEXT      NOT NULL                     -- Property value.
)"""

TABLES["TARGET_INFO_SESSION_START_TIME"] = """CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs                  INTEGER,                               -- UTC Epoch timestamp at start of the capture (ns).
    utcTime                     TEXT,                                  -- Start of the capture in UTC.
    localTime                   TEXT,                                  -- Start of the capture in local time of target.
    systemClockNs               INTEGER                                -- Target system clock timestamp at start of the capture (ns).
)"""

TABLES["TARGET_INFO_GPU"] = """CREATE TABLE TARGET_INFO_GPU (
    vmId                        INTEGER   NOT NULL,                    -- Serialized GlobalId.
    id                          INTEGER   NOT NULL,                    -- Device ID.
    name                        TEXT,                                  -- Device name.
    busLocation                 TEXT,                                  -- PCI bus location.
    isDiscrete                  INTEGER,                               -- True if discrete, false if integrated.
    l2CacheSize                 INTEGER,                               -- Size of L2 cache (B).
    totalMemory                 INTEGER,                               -- Total amount of memory on the device (B).
    memoryBandwidth             INTEGER,                               -- Amount of memory transferred (B).
    clockRate                   INTEGER,                               -- Clock frequency (Hz).
    smCount                     INTEGER,                               -- Number of multiprocessors on the device.
    pwGpuId                     INTEGER,                               -- PerfWorks GPU ID.
    uuid                        TEXT,                                  -- Device UUID.
    luid                        INTEGER,                               -- Device LUID.
    chipName                    TEXT,                                  -- Chip name.
    cuDevice                    INTEGER,                               -- CUDA device ID.
    ctxswDevPath                TEXT,                                  -- GPU context switch device node path.
    ctrlDevPath                 TEXT,                                  -- GPU control device node path.
    revision                    INTEGER,                               -- Revision number.
    nodeMask                    INTEGER,                               -- Device node mask.
    constantMemory              INTEGER,                               -- Memory available on device for __constant__ variables (B).
    maxIPC                      INTEGER,                               -- Maximum instructions per count.
    maxRegistersPerBlock        INTEGER,                               -- Maximum number of 32-bit registers available per block.
    maxShmemPerBlock            INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerBlockOptin       INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerSm               INTEGER,                               -- Maximum shared memory available per multiprocessor (B).
    maxRegistersPerSm           INTEGER,                               -- Maximum number of 32-bit registers available per multiprocessor.
    threadsPerWarp              INTEGER,                               -- Warp size in threads.
    asyncEngines                INTEGER,                               -- Number of asynchronous engines.
    maxWarpsPerSm               INTEGER,                               -- Maximum number of warps per multiprocessor.
    maxBlocksPerSm              INTEGER,                               -- Maximum number of blocks per multiprocessor.
    maxThreadsPerBlock          INTEGER,                               -- Maximum number of threads per block.
    maxBlockDimX                INTEGER,                               -- Maximum X-dimension of a block.
    maxBlockDimY                INTEGER,                               -- Maximum Y-dimension of a block.
    maxBlockDimZ                INTEGER,                               -- Maximum Z-dimension of a block.
    maxGridDimX                 INTEGER,                               -- Maximum X-dimension of a grid.
    maxGridDimY                 INTEGER,                               -- Maximum Y-dimension of a grid.
    maxGridDimZ                 INTEGER,                               -- Maximum Z-dimension of a grid.
    computeMajor                INTEGER,                               -- Major compute capability version number.
    computeMinor                INTEGER,                               -- Minor compute capability version number.
    smMajor                     INTEGER,                               -- Major multiprocessor version number.
    smMinor                     INTEGER                                -- Minor multiprocessor version number.
)"""

TABLES["TARGET_INFO_CUDA_DEVICE"] = """CREATE TABLE TARGET_INFO_CUDA_DEVICE (
    gpuId                       INTEGER,                               -- GPU ID.
    cudaId                      INTEGER   NOT NULL,                    -- CUDA device ID.
    pid                         INTEGER   NOT NULL,                    -- Process ID.
    uuid                        TEXT,                                  -- Device UUID.
    numMultiprocessors          INTEGER                                -- Number of SMs available on the device.
)"""

TABLES["CUPTI_ACTIVITY_KIND_KERNEL"] = """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    demangledName               INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Kernel function name w/ templates
    shortName                   INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Base kernel function name
    mangledName                 INTEGER,                               -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
    launchType                  INTEGER,                               -- REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)
    cacheConfig                 INTEGER,                               -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
    registersPerThread          INTEGER   NOT NULL,                    -- Number of registers required for each thread executing the kernel.
    gridX                       INTEGER   NOT NULL,                    -- X-dimension grid size.
    gridY                       INTEGER   NOT NULL,                    -- Y-dimension grid size.
    gridZ                       INTEGER   NOT NULL,                    -- Z-dimension grid size.
    blockX                      INTEGER   NOT NULL,                    -- X-dimension block size.
    blockY                      INTEGER   NOT NULL,                    -- Y-dimension block size.
    blockZ                      INTEGER   NOT NULL,                    -- Z-dimension block size.
    staticSharedMemory          INTEGER   NOT NULL,                    -- Static shared memory allocated for the kernel (B).
    dynamicSharedMemory         INTEGER   NOT NULL,                    -- Dynamic shared memory reserved for the kernel (B).
    localMemoryPerThread        INTEGER   NOT NULL,                    -- Amount of local memory reserved for each thread (B).
    localMemoryTotal            INTEGER   NOT NULL,                    -- Total amount of local memory reserved for the kernel (B).
    gridId                      INTEGER   NOT NULL,                    -- Unique grid ID of the kernel assigned at runtime.
    sharedMemoryExecuted        INTEGER,                               -- Shared memory size set by the driver.
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    sharedMemoryLimitConfig     INTEGER,                               -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
    qmdBulkReleaseDone          INTEGER,                               -- QMD bulk release done timestamp from CWD events.
    qmdPreexitDone              INTEGER,                               -- QMD pre-exit done timestamp from CWD events.
    qmdLastCtaDone              INTEGER,                               -- QMD last CTA done timestamp from CWD events.
    graphId                     INTEGER,                               -- Kernel graph ID.
    clusterX                    INTEGER,                               -- Cluster X dimension.
    clusterY                    INTEGER,                               -- Cluster Y dimension.
    clusterZ                    INTEGER,                               -- Cluster Z dimension.
    clusterSchedulingPolicy     INTEGER,                               -- Cluster scheduling policy.
    maxPotentialClusterSize     INTEGER,                               -- Maximum potential cluster size.
    maxActiveClusters           INTEGER,                               -- Maximum active clusters.
    sharedMemoryRequestedPercentage   INTEGER,                         -- Shared memory requested percentage.
    tensorSizeMinusOneElements   TEXT      NOT NULL                    -- TMA descriptor tensor size minus one elements array.
)"""

TABLES["CUPTI_ACTIVITY_KIND_MEMCPY"] = """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes transferred (B).
    copyKind                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
    deprecatedSrcId             INTEGER,                               -- Deprecated, use srcDeviceId instead.
    srcKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    dstKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    srcDeviceId                 INTEGER,                               -- Source device ID.
    srcContextId                INTEGER,                               -- Source context ID.
    dstDeviceId                 INTEGER,                               -- Destination device ID.
    dstContextId                INTEGER,                               -- Destination context ID.
    migrationCause              INTEGER,                               -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    virtualAddress              INTEGER,                               -- Virtual base address of the page/s being transferred.
    copyCount                   INTEGER                                -- The total number of memcopy operations traced in this record. In CUDA MemcpyBatchAsync APIs, multiple memcpy operations may be batched together for optimization purposes based on certain heuristics.
)"""

TABLES["CUPTI_ACTIVITY_KIND_MEMSET"] = """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    value                       INTEGER   NOT NULL,                    -- Value assigned to memory.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes set (B).
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    memKind                     INTEGER                                -- REFERENCES ENUM_CUDA_MEM_KIND(id)
)"""

TABLES["CUPTI_ACTIVITY_KIND_RUNTIME"] = """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    correlationId               INTEGER,                               -- ID used to identify events that this function call has triggered.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    returnValue                 INTEGER   NOT NULL,                    -- Return value of the function call.
    callchainId                 INTEGER                                -- REFERENCES CUDA_CALLCHAINS(id)
)"""

TABLES[
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
] = """CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- Correlation ID of the synchronization API to which this result is associated.
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    deprecatedSyncType          INTEGER,                               -- Deprecated, use syncType instead. For older report, REFERENCES ENUM_CUPTI_SYNC_TYPE(id)
    syncType                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUPTI_SYNC_TYPE(id)
    eventId                     INTEGER   NOT NULL,                    -- Event ID for which the synchronization API is called.
    eventSyncId                 INTEGER                                -- CUDA Event Sync ID to link the synchronization API to associated event record API.
)"""

TABLES["NVTX_EVENTS"] = """CREATE TABLE NVTX_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER,                               -- Event end timestamp (ns).
    eventType                   INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_TYPE(id)
    rangeId                     INTEGER,                               -- Correlation ID returned from a nvtxRangeStart call.
    category                    INTEGER,                               -- User-controlled ID that can be used to group events.
    color                       INTEGER,                               -- Encoded ARGB color value.
    text                        TEXT,                                  -- Explicit name/text (non-registered string)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    endGlobalTid                INTEGER,                               -- Serialized GlobalId.
    textId                      INTEGER,                               -- REFERENCES StringIds(id) -- Registered NVTX domain/string
    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    uint64Value                 INTEGER,                               -- One of possible payload value union members.
    int64Value                  INTEGER,                               -- One of possible payload value union members.
    doubleValue                 REAL,                                  -- One of possible payload value union members.
    uint32Value                 INTEGER,                               -- One of possible payload value union members.
    int32Value                  INTEGER,                               -- One of possible payload value union members.
    floatValue                  REAL,                                  -- One of possible payload value union members.
    jsonTextId                  INTEGER,                               -- One of possible payload value union members.
    jsonText                    TEXT,                                  -- One of possible payload value union members.
    binaryData                  TEXT                                   -- Binary payload. See docs for format.
)"""

TABLES["NVTX_PAYLOAD_SCHEMAS"] = """CREATE TABLE NVTX_PAYLOAD_SCHEMAS (
    -- NVTX payload schema attributes.

    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    schemaId                    INTEGER,                               -- Identifier of the payload schema.
    name                        TEXT,                                  -- Schema name.
    type                        INTEGER,                               -- Schema type.
    flags                       INTEGER,                               -- Schema flags.
    numEntries                  INTEGER,                               -- Number of payload schema entries.
    payloadSize                 INTEGER,                               -- Size of the static payload.
    alignTo                     INTEGER                                -- Field alignment in bytes.
)"""

TABLES["NVTX_PAYLOAD_SCHEMA_ENTRIES"] = """CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (
    -- NVTX payload schema entries.

    domainId                    INTEGER   NOT NULL,                    -- User-controlled ID that can be used to group events.
    schemaId                    INTEGER   NOT NULL,                    -- Identifier of the payload schema.
    idx                         INTEGER   NOT NULL,                    -- Index of the entry in the payload schema.
    flags                       INTEGER,                               -- Payload entry flags.
    type                        INTEGER,                               -- Payload entry type.
    name                        TEXT,                                  -- Label of the payload entry.
    description                 TEXT,                                  -- Description of the payload entry.
    arrayOrUnionDetail          INTEGER,                               -- Array length (index) or selected union member.
    offset                      INTEGER                                -- Entry offset in the binary data in bytes.
)"""

ENUMS: dict[str, tuple[str, tuple[tuple[int, str, str], ...]]] = {}

ENUMS["ENUM_CUDA_MEMCPY_OPER"] = (
    """CREATE TABLE ENUM_CUDA_MEMCPY_OPER (
    -- CUDA memcpy operation labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"),
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"),
        (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"),
        (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
        (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ),
)

ENUMS["ENUM_CUDA_MEM_KIND"] = (
    """CREATE TABLE ENUM_CUDA_MEM_KIND (
    -- CUDA memory kind labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
        (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ),
)

ENUMS["ENUM_CUDA_KERNEL_LAUNCH_TYPE"] = (
    """CREATE TABLE ENUM_CUDA_KERNEL_LAUNCH_TYPE (
    -- CUDA kernel launch type labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "CUDA_KERNEL_LAUNCH_TYPE_UNKNOWN", "Unknown"),
        (1, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"),
        (2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Coop Single Device"),
        (3, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Coop Multi Device"),
    ),
)

ENUMS["ENUM_CUDA_FUNC_CACHE_CONFIG"] = (
    """CREATE TABLE ENUM_CUDA_FUNC_CACHE_CONFIG (
    -- CUDA function cache config labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "CU_FUNC_CACHE_PREFER_NONE", "None"),
        (1, "CU_FUNC_CACHE_PREFER_SHARED", "Shared"),
        (2, "CU_FUNC_CACHE_PREFER_L1", "L1"),
        (3, "CU_FUNC_CACHE_PREFER_EQUAL", "Equal"),
    ),
)

ENUMS["ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG"] = (
    """CREATE TABLE ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG (
    -- CUDA shared memory limit config labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "CUDA_SHARED_MEM_LIMIT_DEFAULT", "Default"),
        (1, "CUDA_SHARED_MEM_LIMIT_OPTIN", "Opt in"),
    ),
)

ENUMS["ENUM_CUPTI_SYNC_TYPE"] = (
    """CREATE TABLE ENUM_CUPTI_SYNC_TYPE (
    -- CUPTI synchronization type labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ),
)

ENUMS["ENUM_NSYS_EVENT_CLASS"] = (
    """CREATE TABLE ENUM_NSYS_EVENT_CLASS (
    -- Nsys event class labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (2, "TRACE_PROCESS_EVENT_GL", "GL"),
        (3, "TRACE_PROCESS_EVENT_TSP_OVERHEAD", "TSP overhead"),
        (4, "TRACE_PROCESS_EVENT_GL_DEBUG", "GL debug"),
        (5, "TRACE_PROCESS_EVENT_GL_WORKLOAD", "GL workload"),
        (6, "TRACE_PROCESS_EVENT_NVTX_START", "NVTX start"),
        (7, "TRACE_PROCESS_EVENT_NVTX_FINISH", "NVTX finish"),
        (8, "TRACE_PROCESS_EVENT_GL_START", "GL start"),
        (9, "TRACE_PROCESS_EVENT_GL_FINISH", "GL finish"),
        (10, "TRACE_PROCESS_EVENT_CUDA_START", "CUDA start"),
        (11, "TRACE_PROCESS_EVENT_CUDA_FINISH", "CUDA finish"),
        (12, "TRACE_PROCESS_EVENT_CUDA_INIT_ERROR", "CUDA init error"),
        (13, "TRACE_PROCESS_EVENT_CUDA_EGL_DRIVER", "CUDA EGL driver"),
        (18, "TRACE_PROCESS_EVENT_VSYNC", "Vsync"),
        (26, "TRACE_PROCESS_EVENT_CUDA_API", "CUDA API"),
        (27, "TRACE_PROCESS_EVENT_OS_RUNTIME", "OSRT runtime"),
        (28, "TRACE_PROCESS_EVENT_CUDNN", "cuDNN"),
        (29, "TRACE_PROCESS_EVENT_CUBLAS", "cuBLAS"),
        (31, "TRACE_PROCESS_EVENT_OS_RUNTIME_START", "OSRT start"),
        (32, "TRACE_PROCESS_EVENT_OS_RUNTIME_FINISH", "OSRT finish"),
        (33, "TRACE_PROCESS_EVENT_CUDNN_START", "cuDNN start"),
        (34, "TRACE_PROCESS_EVENT_CUDNN_FINISH", "cuDNN finish"),
        (35, "TRACE_PROCESS_EVENT_CUBLAS_START", "cuBLAS start"),
        (36, "TRACE_PROCESS_EVENT_CUBLAS_FINISH", "cuBLAS finish"),
        (37, "TRACE_PROCESS_EVENT_THREAD_BLOCK", "Thread block"),
        (38, "TRACE_PROCESS_EVENT_NVMEDIA", "NVmedia"),
        (39, "TRACE_PROCESS_EVENT_NVMEDIA_START", "NVmedia start"),
        (40, "TRACE_PROCESS_EVENT_NVMEDIA_FINISH", "NVmedia finish"),
        (41, "TRACE_PROCESS_EVENT_DX12_API", "DX12 API"),
        (42, "TRACE_PROCESS_EVENT_DX12_WORKLOAD", "DX12 workload"),
        (43, "TRACE_PROCESS_EVENT_DX12_START", "DX12 start"),
        (44, "TRACE_PROCESS_EVENT_DX12_FINISH", "DX12 finish"),
        (45, "TRACE_PROCESS_EVENT_OPENACC_START", "OpenACC start"),
        (46, "TRACE_PROCESS_EVENT_OPENACC_FINISH", "OpenACC finish"),
        (47, "TRACE_PROCESS_EVENT_OPENACC_INIT_ERROR", "OpenACC init error"),
        (48, "TRACE_PROCESS_EVENT_OPENACC", "OpenACC"),
        (49, "TRACE_PROCESS_EVENT_CPU_FPS", "CPU FPS"),
        (50, "TRACE_PROCESS_EVENT_GPU_FPS", "GPU FPS"),
        (51, "TRACE_PROCESS_EVENT_GL_MULTI_ERROR", "GL multi-error"),
        (52, "TRACE_PROCESS_EVENT_DX12_DISPLAY", "DX12 display"),
        (53, "TRACE_PROCESS_EVENT_VULKAN_API", "Vulkan API"),
        (54, "TRACE_PROCESS_EVENT_VULKAN_WORKLOAD", "Vulkan workload"),
        (55, "TRACE_PROCESS_EVENT_VULKAN_START", "Vulkan start"),
        (56, "TRACE_PROCESS_EVENT_VULKAN_FINISH", "Vulkan finish"),
        (57, "TRACE_PROCESS_EVENT_SYSTEM_EVENT", "System event"),
        (58, "TRACE_PROCESS_EVENT_GPU_MEMORY", "GPU memory"),
        (59, "TRACE_PROCESS_EVENT_DX12_CREATE_OBJECT", "DX12 create object"),
        (60, "TRACE_PROCESS_EVENT_VULKAN_CREATE_OBJECT", "Vulkan create object"),
        (61, "TRACE_PROCESS_EVENT_CUSTOM_ETW_TRACE", "Custom ETW trace"),
        (62, "TRACE_PROCESS_EVENT_SLI_DEPRECATED", "SLI (Deprecated)"),
        (63, "TRACE_PROCESS_EVENT_SLI_START_DEPRECATED", "SLI start (Deprecated)"),
        (64, "TRACE_PROCESS_EVENT_SLI_FINISH_DEPRECATED", "SLI finish (Deprecated)"),
        (65, "TRACE_PROCESS_EVENT_DX12_DEBUG_API", "DX12 debug API"),
        (66, "TRACE_PROCESS_EVENT_VULKAN_DEBUG_API", "Vulkan debug API"),
        (67, "TRACE_PROCESS_EVENT_CUDABACKTRACE", "CUDA backtrace"),
        (68, "TRACE_PROCESS_EVENT_CUDABACKTRACE_START", "CUDA backtrace start"),
        (69, "TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH", "CUDA backtrace finish"),
        (70, "TRACE_PROCESS_EVENT_WDDM", "WDDM"),
        (71, "TRACE_PROCESS_EVENT_DX11_API", "DX11 API"),
        (72, "TRACE_PROCESS_EVENT_DX11_START", "DX11 start"),
        (73, "TRACE_PROCESS_EVENT_DX11_FINISH", "DX11 finish"),
        (74, "TRACE_PROCESS_EVENT_DX11_CREATE_OBJECT", "DX11 create object"),
        (75, "TRACE_PROCESS_EVENT_DX11_DEBUG_API", "DX11 debug API"),
        (76, "TRACE_PROCESS_EVENT_DXCOMMON_API", "DX common API"),
        (77, "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION", "CUDA graph node creation"),
        (78, "TRACE_PROCESS_EVENT_OPENMP", "OpenMP"),
        (79, "TRACE_PROCESS_EVENT_OPENMP_START", "OpenMP start"),
        (80, "TRACE_PROCESS_EVENT_OPENMP_FINISH", "OpenMP finish"),
        (81, "TRACE_PROCESS_EVENT_NVAPI", "NV API"),
        (82, "TRACE_PROCESS_EVENT_ETWDXGKRNL", "ETW DXG KRNL"),
        (83, "TRACE_PROCESS_EVENT_NVENCODE", "NVENCODE"),
        (84, "TRACE_PROCESS_EVENT_NVENCODE_START", "NVENCODE start"),
        (85, "TRACE_PROCESS_EVENT_NVENCODE_FINISH", "NVENCODE finish"),
        (86, "TRACE_PROCESS_EVENT_NVDECODE", "NVDECODE"),
        (87, "TRACE_PROCESS_EVENT_NVDECODE_START", "NVDECODE start"),
        (88, "TRACE_PROCESS_EVENT_NVDECODE_FINISH", "NVDECODE finish"),
        (89, "TRACE_PROCESS_EVENT_NVJPEG", "nvJPEG"),
        (90, "TRACE_PROCESS_EVENT_NVJPEG_START", "nvJPEG start"),
        (91, "TRACE_PROCESS_EVENT_NVJPEG_FINISH", "nvJPEG finish"),
        (92, "TRACE_PROCESS_EVENT_DX12_BATCH_WORKLOAD", "DX12 batch workload"),
        (93, "TRACE_PROCESS_EVENT_VULKAN_BATCH_WORKLOAD", "Vulkan batch workload"),
        (94, "TRACE_PROCESS_EVENT_CUDA_GRAPHEXEC_CREATION", "CUDA graph exec creation"),
        (95, "TRACE_PROCESS_EVENT_CUDA_GRAPH_CREATION", "CUDA graph creation"),
        (96, "TRACE_PROCESS_EVENT_CUDA_GRAPH_CLONE", "CUDA graph clone"),
        (98, "TRACE_PROCESS_EVENT_OPENCL", "OpenCL event"),
        (99, "TRACE_PROCESS_EVENT_OPENCL_START", "OpenCL start"),
        (100, "TRACE_PROCESS_EVENT_OPENCL_FINISH", "OpenCL finish"),
        (101, "TRACE_PROCESS_EVENT_OPENCL_INIT_ERROR", "OpenCL Init error"),
        (102, "TRACE_PROCESS_EVENT_CUDA_JIT", "CUDA JIT"),
        (103, "TRACE_PROCESS_EVENT_CUDA_OVERHEAD", "CUDA overhead"),
        (104, "TRACE_PROCESS_EVENT_OPENXR", "OpenXR event"),
        (105, "TRACE_PROCESS_EVENT_OPENXR_START", "OpenXR start"),
        (106, "TRACE_PROCESS_EVENT_OPENXR_FINISH", "OpenXR finish"),
        (107, "TRACE_PROCESS_EVENT_SYSCALL", "Syscall"),
        (108, "TRACE_PROCESS_EVENT_TEGRA_INTERNAL", "Tegra Internal API"),
        (109, "TRACE_PROCESS_EVENT_TEGRA_INTERNAL_START", "Tegra Internal API start"),
        (110, "TRACE_PROCESS_EVENT_TEGRA_INTERNAL_FINISH", "Tegra Internal API finish"),
        (
            111,
            "TRACE_PROCESS_EVENT_CUDA_GRAPH_EXEC_NODE_SET_PARAMS",
            "CUDA graph exec-node set params",
        ),
    ),
)

ENUMS["ENUM_NSYS_EVENT_TYPE"] = (
    """CREATE TABLE ENUM_NSYS_EVENT_TYPE (
    -- Nsys event type labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    (
        (0, "Unknown", "Unknown"),
        (1, "CpuCycles", "CpuCycles"),
        (2, "Instructions", "Instructions"),
        (3, "CacheReferences", "CacheReferences"),
        (4, "L1CacheDataWriteMisses", "L1CacheDataWriteMisses"),
        (5, "L1CacheDataReadMisses", "L1CacheDataReadMisses"),
        (6, "L1CacheInstructionMisses", "L1CacheInstructionMisses"),
        (7, "L2CacheDataWriteMisses", "L2CacheDataWriteMisses"),
        (8, "L2CacheDataReadMisses", "L2CacheDataReadMisses"),
        (9, "L2CacheInstructionMisses", "L2CacheInstructionMisses"),
        (10, "BranchInstructions", "BranchInstructions"),
        (11, "BranchMisses", "BranchMisses"),
        (12, "BusCycles", "BusCycles"),
        (13, "CpuClock", "CpuClock"),
        (14, "TaskClock", "TaskClock"),
        (15, "PageFault", "PageFault"),
        (16, "ContextSwitches", "ContextSwitches"),
        (17, "CpuMigrations", "CpuMigrations"),
        (18, "PageFaultsMin", "PageFaultsMin"),
        (19, "PageFaultsMax", "PageFaultsMax"),
        (20, "AlignmentFaults", "AlignmentFaults"),
        (21, "EmulationFaults", "EmulationFaults"),
        (22, "ThreadState", "ThreadState"),
        (23, "Frames", "Frames"),
        (24, "Annotations", "Annotations"),
        (25, "SchedSwitch", "SchedSwitch"),
        (26, "SchedWakeup", "SchedWakeup"),
        (27, "Command", "Command"),
        (28, "Mmap", "Mmap"),
        (29, "MemUsage", "MemUsage"),
        (30, "Emc", "Emc"),
        (31, "Composite", "Composite"),
        (32, "NvtxEvents", "NvtxEvents"),
        (33, "NvtxCategory", "NvtxCategory"),
        (34, "NvtxMark", "NvtxMark"),
        (35, "NvtxPushRange", "NvtxPushRange"),
        (36, "NvtxPopRange", "NvtxPopRange"),
        (37, "NvtxStartRange", "NvtxStartRange"),
        (38, "NvtxEndRange", "NvtxEndRange"),
        (39, "NvtxThread", "NvtxThread"),
        (40, "PowerRate", "PowerRate"),
        (41, "Sched", "Sched"),
        (42, "CpuCyclesSelf", "CpuCyclesSelf"),
        (43, "CpuCyclesTotal", "CpuCyclesTotal"),
        (44, "CpuCyclesSelfPlus", "CpuCyclesSelfPlus"),
        (45, "Cuda", "Cuda"),
        (46, "CudaDevice", "CudaDevice"),
        (47, "TraceProcess", "TraceProcess"),
        (48, "TraceFunctions", "TraceFunctions"),
        (49, "Diagnostic", "Diagnostic"),
        (50, "GlWorkload", "GlWorkload"),
        (51, "BandwidthUsage", "BandwidthUsage"),
        (52, "KhrDebugMark", "KhrDebugMark"),
        (53, "KhrDebugPushRange", "KhrDebugPushRange"),
        (54, "KhrDebugPopRange", "KhrDebugPopRange"),
        (55, "KhrDebugGpuMark", "KhrDebugGpuMark"),
        (56, "KhrDebugGpuPushRange", "KhrDebugGpuPushRange"),
        (57, "KhrDebugGpuPopRange", "KhrDebugGpuPopRange"),
        (58, "GpuCtxsw", "GpuCtxsw"),
        (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"),
        (61, "ProfTime", "ProfTime"),
        (62, "KhrDebugPushPopRange", "KhrDebugPushPopRange"),
        (63, "KhrDebugGpuPushPopRange", "KhrDebugGpuPushPopRange"),
        (64, "NvtxtCategory", "NvtxtCategory"),
        (65, "NvtxtMark", "NvtxtMark"),
        (66, "NvtxtPushRange", "NvtxtPushRange"),
        (67, "NvtxtPopRange", "NvtxtPopRange"),
        (68, "NvtxtStartRange", "NvtxtStartRange"),
        (69, "NvtxtEndRange", "NvtxtEndRange"),
        (70, "NvtxtPushPopRange", "NvtxtPushPopRange"),
        (71, "NvtxtStartEndRange", "NvtxtStartEndRange"),
        (72, "NvtxtMetaThread", "NvtxtMetaThread"),
        (73, "NvtxtMetaProcess", "NvtxtMetaProcess"),
        (74, "NvtxtMetaFileDisplay", "NvtxtMetaFileDisplay"),
        (75, "NvtxDomainCreate", "NvtxDomainCreate"),
        (76, "NvtxDomainDestroy", "NvtxDomainDestroy"),
        (77, "NvnGpuCmdBuf", "NvnGpuCmdBuf"),
        (78, "TraceVSync", "TraceVSync"),
        (79, "CudaDeviceKernel", "CudaDeviceKernel"),
        (80, "CudaDeviceMemory", "CudaDeviceMemory"),
        (81, "Pmu", "Pmu"),
        (82, "NvnGpuDraw", "NvnGpuDraw"),
        (83, "NvnGpuCompute", "NvnGpuCompute"),
        (84, "NvnGpuDebug", "NvnGpuDebug"),
        (85, "OS runtime libraries", "OS runtime libraries"),
        (86, "CuDNN", "CuDNN"),
        (87, "CuBLAS", "CuBLAS"),
        (88, "NvMedia", "NvMedia"),
        (89, "OpenACC", "OpenACC"),
        (90, "Correlation", "Correlation"),
        (91, "DX12", "DX12"),
        (92, "DX12Workload", "DX12Workload"),
        (93, "PmuRawEvent", "PmuRawEvent"),
        (94, "GraphicsFrame", "GraphicsFrame"),
        (95, "Vulkan", "Vulkan"),
        (96, "VulkanWorkload", "VulkanWorkload"),
        (97, "NvtxNameCudaDevice", "NvtxNameCudaDevice"),
        (98, "NvtxNameCudaContext", "NvtxNameCudaContext"),
        (99, "NvtxNameCudaStream", "NvtxNameCudaStream"),
        (100, "SystemEvent", "SystemEvent"),
        (101, "GpuMemoryEvent", "GpuMemoryEvent"),
        (102, "DX12CreateObject", "DX12CreateObject"),
        (103, "VulkanCreateObject", "VulkanCreateObject"),
        (104, "UnitTraceEvent", "UnitTraceEvent"),
        (105, "CustomETWEvent", "CustomETWEvent"),
        (106, "CudaSyncEvent", "CudaSyncEvent"),
        (107, "SLIEvent (DEPRECATED)", "SLIEvent (DEPRECATED)"),
        (108, "CudaBacktrace", "CudaBacktrace"),
        (109, "WddmEvent", "WddmEvent"),
        (110, "DX11", "DX11"),
        (111, "DX11CreateObject", "DX11CreateObject"),
        (112, "DXGI", "DXGI"),
        (113, "CudaGraphNodeCreation", "CudaGraphNodeCreation"),
        (114, "OpenMP", "OpenMP"),
        (115, "UncorePmuEvent", "UncorePmuEvent"),
        (116, "UncorePmuCarmel", "UncorePmuCarmel"),
        (117, "CudaDeviceMemoryUsage", "CudaDeviceMemoryUsage"),
        (118, "ETWDxgKrnlEvent", "ETWDxgKrnlEvent"),
        (119, "CudaUvmCpuPageFaultEvent", "CudaUvmCpuPageFaultEvent"),
        (120, "CudaUvmGpuPageFaultEvent", "CudaUvmGpuPageFaultEvent"),
        (121, "NICMetricsValuesEvent", "NICMetricsValuesEvent"),
        (122, "NICMetricsListEvent", "NICMetricsListEvent"),
        (123, "InterruptHandler", "InterruptHandler"),
        (124, "NvEncode", "NvEncode"),
        (125, "NVDecode", "NVDecode"),
        (126, "nvJPEG", "nvJPEG"),
        (127, "CudaEventRecord", "CudaEventRecord"),
        (128, "PerfEventCountEvent", "PerfEventCountEvent"),
        (129, "CudaDeviceMemoryPool", "CudaDeviceMemoryPool"),
        (130, "CudaDeviceGraph", "CudaDeviceGraph"),
        (131, "CudaGraphExecCreation", "CudaGraphExecCreation"),
        (132, "CudaGraphCreation", "CudaGraphCreation"),
        (133, "CudaGraphClone", "CudaGraphClone"),
        (134, "GpuMemoryTransferEvent", "GpuMemoryTransferEvent"),
        (135, "GlTrace", "GlTrace"),
        (136, "GpuVideoEngineWorkload", "GpuVideoEngineWorkload"),
        (137, "IBSwitchMetricsValuesEvent", "IBSwitchMetricsValuesEvent"),
        (138, "GenericEvent", "GenericEvent"),
        (139, "UncorePmuT23xScf", "UncorePmuT23xScf"),
        (140, "UncorePmuT23xDsu", "UncorePmuT23xDsu"),
        (141, "IBSwitchCongestionEvent", "IBSwitchCongestionEvent"),
        (142, "CudaDeviceMemcpy", "CudaDeviceMemcpy"),
        (143, "PerfMetricValueEvent", "PerfMetricValueEvent"),
        (144, "OpenXREvent", "OpenXREvent"),
        (145, "TegraInternalEvent", "TegraInternalEvent"),
        (146, "TraceStartFinish", "TraceStartFinish"),
        (147, "Syscall", "Syscall"),
        (148, "CudaConfidentialComputeKeyRotation", "CudaConfidentialComputeKeyRotation"),
        (149, "CudaGraphExecNodeSetParams", "CudaGraphExecNodeSetParams"),
        (150, "NvApi", "NvApi"),
        (151, "CudaHostFunc", "CudaHostFunc"),
        (152, "CudaApi", "CudaApi"),
        (153, "Overhead", "Overhead"),
        (154, "CudaOverhead", "CudaOverhead"),
    ),
)
