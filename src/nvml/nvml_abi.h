/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Our own declaration of the subset of the NVML C ABI that gpuop calls.
 *
 * NVIDIA's nvml.h is not available to this build, so the types, constants
 * and prototypes below are written from the documented ABI (values as in
 * NVML API version 12/13; struct layouts checked against published
 * bindings).  Two consumers include this file:
 *   - src/nvml/nvml.c resolves these symbols with dlsym() at run time;
 *   - sim/ implements them, producing a drop-in libnvidia-ml.so.1.
 * Keep the layouts bit-exact: the same binary runs against the real library.
 */
#ifndef GPUOP_NVML_ABI_H
#define GPUOP_NVML_ABI_H

#include <stdint.h>

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef enum nvmlReturn_enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_DEPRECATED = 26,
	NVML_ERROR_NOT_READY = 27,
	NVML_ERROR_GPU_NOT_FOUND = 28,
	NVML_ERROR_INVALID_STATE = 29,
	NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

/* Buffer sizes the API documents for string outputs. */
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

/* Links are probed up to this index; a library built with fewer answers
 * INVALID_ARGUMENT past its own maximum (12, 18 or 36 by header version). */
#define NVML_NVLINK_MAX_LINKS 36

#define NVML_INIT_FLAG_NO_GPUS 1u
#define NVML_INIT_FLAG_NO_ATTACH 2u

#define NVML_CUDA_DRIVER_VERSION_MAJOR(v) ((v) / 1000)
#define NVML_CUDA_DRIVER_VERSION_MINOR(v) (((v) % 1000) / 10)

typedef enum nvmlEnableState_enum {
	NVML_FEATURE_DISABLED = 0,
	NVML_FEATURE_ENABLED = 1,
} nvmlEnableState_t;

#define NVML_DEVICE_MIG_DISABLE 0u
#define NVML_DEVICE_MIG_ENABLE 1u

typedef enum nvmlBrandType_enum {
	NVML_BRAND_UNKNOWN = 0,
	NVML_BRAND_QUADRO = 1,
	NVML_BRAND_TESLA = 2,
	NVML_BRAND_NVS = 3,
	NVML_BRAND_GRID = 4,
	NVML_BRAND_GEFORCE = 5,
	NVML_BRAND_TITAN = 6,
	NVML_BRAND_NVIDIA_VAPPS = 7,
	NVML_BRAND_NVIDIA_VPC = 8,
	NVML_BRAND_NVIDIA_VCS = 9,
	NVML_BRAND_NVIDIA_VWS = 10,
	NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
	NVML_BRAND_QUADRO_RTX = 12,
	NVML_BRAND_NVIDIA_RTX = 13,
	NVML_BRAND_NVIDIA = 14,
	NVML_BRAND_GEFORCE_RTX = 15,
	NVML_BRAND_TITAN_RTX = 16,
} nvmlBrandType_t;

typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2u
#define NVML_DEVICE_ARCH_MAXWELL 3u
#define NVML_DEVICE_ARCH_PASCAL 4u
#define NVML_DEVICE_ARCH_VOLTA 5u
#define NVML_DEVICE_ARCH_TURING 6u
#define NVML_DEVICE_ARCH_AMPERE 7u
#define NVML_DEVICE_ARCH_ADA 8u
#define NVML_DEVICE_ARCH_HOPPER 9u
#define NVML_DEVICE_ARCH_BLACKWELL 10u
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffu

typedef enum nvmlTemperatureSensors_enum {
	NVML_TEMPERATURE_GPU = 0,
} nvmlTemperatureSensors_t;

typedef enum nvmlClockType_enum {
	NVML_CLOCK_GRAPHICS = 0,
	NVML_CLOCK_SM = 1,
	NVML_CLOCK_MEM = 2,
	NVML_CLOCK_VIDEO = 3,
} nvmlClockType_t;

typedef enum nvmlGpuLevel_enum {
	NVML_TOPOLOGY_INTERNAL = 0,
	NVML_TOPOLOGY_SINGLE = 10,
	NVML_TOPOLOGY_MULTIPLE = 20,
	NVML_TOPOLOGY_HOSTBRIDGE = 30,
	NVML_TOPOLOGY_NODE = 40,
	NVML_TOPOLOGY_SYSTEM = 50,
} nvmlGpuTopologyLevel_t;

typedef unsigned int nvmlAffinityScope_t;
#define NVML_AFFINITY_SCOPE_NODE 0u
#define NVML_AFFINITY_SCOPE_SOCKET 1u

typedef struct nvmlPciInfo_st {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;    /* (device id << 16) | vendor id */
	unsigned int pciSubSystemId; /* (subsystem id << 16) | subsystem vendor */
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
	unsigned long long total; /* bytes */
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
	unsigned int version; /* nvmlMemory_v2 */
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

/* Versioned structs carry sizeof | (version << 24) in their first field. */
#define NVML_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((ver) << 24u)))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory_v2_t, 2)

typedef struct nvmlUtilization_st {
	unsigned int gpu;    /* percent */
	unsigned int memory; /* percent */
} nvmlUtilization_t;

/* Event types (bit mask). */
#define nvmlEventTypeNone 0x0ULL
#define nvmlEventTypeSingleBitEccError 0x1ULL
#define nvmlEventTypeDoubleBitEccError 0x2ULL
#define nvmlEventTypePState 0x4ULL
#define nvmlEventTypeXidCriticalError 0x8ULL
#define nvmlEventTypeClock 0x10ULL
#define nvmlEventTypePowerSourceChange 0x80ULL
#define nvmlEventTypeSingleBitEccErrorStorm 0x200ULL
#define nvmlEventTypeDramRetirementEvent 0x400ULL
#define nvmlEventTypeDramRetirementFailure 0x800ULL
#define nvmlEventTypeNonFatalPoisonError 0x1000ULL
#define nvmlEventTypeFatalPoisonError 0x2000ULL
#define nvmlEventTypeGpuUnavailableError 0x4000ULL
#define nvmlEventTypeGpuRecoveryAction 0x8000ULL

#define NVML_INSTANCE_ID_UNATTRIBUTED 0xFFFFFFFFu

typedef struct nvmlEventData_st {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData; /* the XID for XidCriticalError; 999 = unknown */
	unsigned int gpuInstanceId;   /* 0xFFFFFFFF when not attributable */
	unsigned int computeInstanceId;
} nvmlEventData_t;

typedef enum nvmlValueType_enum {
	NVML_VALUE_TYPE_DOUBLE = 0,
	NVML_VALUE_TYPE_UNSIGNED_INT = 1,
	NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
	NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
	NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
	NVML_VALUE_TYPE_SIGNED_INT = 5,
} nvmlValueType_t;

typedef union nvmlValue_st {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
	unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
	unsigned int fieldId;
	unsigned int scopeId; /* link number for NVLink fields; UINT_MAX = all */
	long long timestamp;  /* microseconds since the epoch */
	long long latencyUsec;
	nvmlValueType_t valueType;
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;

/* Field ids used by gpuop. */
#define NVML_FI_DEV_ECC_SBE_VOL_TOTAL 3u
#define NVML_FI_DEV_ECC_DBE_VOL_TOTAL 4u
#define NVML_FI_DEV_ECC_SBE_AGG_TOTAL 5u
#define NVML_FI_DEV_ECC_DBE_AGG_TOTAL 6u
#define NVML_FI_DEV_MEMORY_TEMP 82u
#define NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION 83u
#define NVML_FI_DEV_PCIE_REPLAY_COUNTER 94u
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX 138u
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX 139u
#define NVML_FI_DEV_REMAPPED_COR 142u
#define NVML_FI_DEV_REMAPPED_UNC 143u
#define NVML_FI_DEV_REMAPPED_PENDING 144u
#define NVML_FI_DEV_REMAPPED_FAILURE 145u

typedef struct nvmlDeviceAttributes_st {
	unsigned int multiprocessorCount;
	unsigned int sharedCopyEngineCount;
	unsigned int sharedDecoderCount;
	unsigned int sharedEncoderCount;
	unsigned int sharedJpegCount;
	unsigned int sharedOfaCount;
	unsigned int gpuInstanceSliceCount;
	unsigned int computeInstanceSliceCount;
	unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* GPU instance profiles (ids for nvmlDeviceGetGpuInstanceProfileInfo). */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0u
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1u
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2u
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3u
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4u
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5u
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6u
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7u
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8u
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9u
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX 0xAu
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX 0xBu
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX 0xCu
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME 0xDu
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME 0xEu
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME 0xFu
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME 0x10u
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX 0x11u
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12u

#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0u
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE 0x1u
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE 0x2u
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE 0x3u
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4u
#define NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE 0x5u
#define NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE 0x6u
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 0x7u
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9u
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0u

typedef struct nvmlGpuInstanceProfileInfo_st {
	unsigned int id;
	unsigned int isP2pSupported;
	unsigned int sliceCount;
	unsigned int instanceCount; /* most instances of this profile */
	unsigned int multiprocessorCount;
	unsigned int copyEngineCount;
	unsigned int decoderCount;
	unsigned int encoderCount;
	unsigned int jpegCount;
	unsigned int ofaCount;
	unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstancePlacement_st {
	unsigned int start;
	unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceInfo_st {
	nvmlDevice_t device;
	unsigned int id;
	unsigned int profileId;
	nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
	unsigned int start;
	unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceInfo_st {
	nvmlDevice_t device;
	nvmlGpuInstance_t gpuInstance;
	unsigned int id;
	unsigned int profileId;
	nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
	unsigned int id;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int sharedCopyEngineCount;
	unsigned int sharedDecoderCount;
	unsigned int sharedEncoderCount;
	unsigned int sharedJpegCount;
	unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

/*
 * Every function gpuop resolves, as an X-macro so the binding's function
 * table, its symbol names and the simulator's exports cannot drift apart.
 *   X(name, return, (parameters))
 * Versioned names are listed separately; the binding picks the newest one
 * present (see NVML_FALLBACKS in src/nvml/nvml.c).
 */
#define NVML_FUNCTIONS(X)                                                                          \
	X(nvmlInit_v2, (void))                                                                     \
	X(nvmlInit, (void))                                                                        \
	X(nvmlShutdown, (void))                                                                    \
	X(nvmlSystemGetDriverVersion, (char *version, unsigned int length))                        \
	X(nvmlSystemGetNVMLVersion, (char *version, unsigned int length))                          \
	X(nvmlSystemGetCudaDriverVersion, (int *cudaDriverVersion))                                \
	X(nvmlSystemGetCudaDriverVersion_v2, (int *cudaDriverVersion))                             \
	X(nvmlDeviceGetCount_v2, (unsigned int *deviceCount))                                      \
	X(nvmlDeviceGetCount, (unsigned int *deviceCount))                                         \
	X(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t *device))               \
	X(nvmlDeviceGetHandleByIndex, (unsigned int index, nvmlDevice_t *device))                  \
	X(nvmlDeviceGetHandleByUUID, (const char *uuid, nvmlDevice_t *device))                     \
	X(nvmlDeviceGetIndex, (nvmlDevice_t device, unsigned int *index))                          \
	X(nvmlDeviceGetName, (nvmlDevice_t device, char *name, unsigned int length))               \
	X(nvmlDeviceGetUUID, (nvmlDevice_t device, char *uuid, unsigned int length))               \
	X(nvmlDeviceGetSerial, (nvmlDevice_t device, char *serial, unsigned int length))           \
	X(nvmlDeviceGetBrand, (nvmlDevice_t device, nvmlBrandType_t * type))                       \
	X(nvmlDeviceGetArchitecture, (nvmlDevice_t device, nvmlDeviceArchitecture_t * arch))       \
	X(nvmlDeviceGetMinorNumber, (nvmlDevice_t device, unsigned int *minorNumber))              \
	X(nvmlDeviceGetPciInfo_v3, (nvmlDevice_t device, nvmlPciInfo_t * pci))                     \
	X(nvmlDeviceGetPciInfo_v2, (nvmlDevice_t device, nvmlPciInfo_t * pci))                     \
	X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t * memory))                   \
	X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t * memory))             \
	X(nvmlDeviceGetCudaComputeCapability, (nvmlDevice_t device, int *major, int *minor))       \
	X(nvmlDeviceGetMigMode, (nvmlDevice_t device, unsigned int *currentMode,                   \
				 unsigned int *pendingMode))                                       \
	X(nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t device, unsigned int *count))              \
	X(nvmlDeviceGetMigDeviceHandleByIndex, (nvmlDevice_t device, unsigned int index,           \
						nvmlDevice_t *migDevice))                          \
	X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, (nvmlDevice_t migDevice,                   \
							 nvmlDevice_t * device))                   \
	X(nvmlDeviceIsMigDeviceHandle, (nvmlDevice_t device, unsigned int *isMigDevice))           \
	X(nvmlDeviceGetGpuInstanceId, (nvmlDevice_t device, unsigned int *id))                     \
	X(nvmlDeviceGetComputeInstanceId, (nvmlDevice_t device, unsigned int *id))                 \
	X(nvmlDeviceGetAttributes_v2, (nvmlDevice_t device, nvmlDeviceAttributes_t * attributes))  \
	X(nvmlDeviceGetGpuInstanceProfileInfo, (nvmlDevice_t device, unsigned int profile,         \
						nvmlGpuInstanceProfileInfo_t * info))              \
	X(nvmlDeviceGetGpuInstanceById, (nvmlDevice_t device, unsigned int id,                     \
					 nvmlGpuInstance_t * gpuInstance))                         \
	X(nvmlGpuInstanceGetInfo, (nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t * info))   \
	X(nvmlGpuInstanceGetComputeInstanceById, (nvmlGpuInstance_t gpuInstance, unsigned int id,  \
						  nvmlComputeInstance_t * computeInstance))        \
	X(nvmlGpuInstanceGetComputeInstanceProfileInfo,                                            \
	  (nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,           \
	   nvmlComputeInstanceProfileInfo_t * info))                                               \
	X(nvmlComputeInstanceGetInfo_v2, (nvmlComputeInstance_t computeInstance,                   \
					  nvmlComputeInstanceInfo_t * info))                       \
	X(nvmlDeviceGetNvLinkState, (nvmlDevice_t device, unsigned int link,                       \
				     nvmlEnableState_t * isActive))                                \
	X(nvmlDeviceGetNvLinkRemotePciInfo_v2, (nvmlDevice_t device, unsigned int link,            \
						nvmlPciInfo_t * pci))                              \
	X(nvmlDeviceGetTopologyCommonAncestor, (nvmlDevice_t device1, nvmlDevice_t device2,        \
						nvmlGpuTopologyLevel_t * pathInfo))                \
	X(nvmlDeviceGetCpuAffinity, (nvmlDevice_t device, unsigned int cpuSetSize,                 \
				     unsigned long *cpuSet))                                       \
	X(nvmlDeviceGetMemoryAffinity, (nvmlDevice_t device, unsigned int nodeSetSize,             \
					unsigned long *nodeSet, nvmlAffinityScope_t scope))        \
	X(nvmlDeviceGetNumaNodeId, (nvmlDevice_t device, unsigned int *node))                      \
	X(nvmlDeviceGetTemperature, (nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,     \
				     unsigned int *temp))                                          \
	X(nvmlDeviceGetPowerUsage, (nvmlDevice_t device, unsigned int *power))                     \
	X(nvmlDeviceGetPowerManagementLimit, (nvmlDevice_t device, unsigned int *limit))           \
	X(nvmlDeviceGetEnforcedPowerLimit, (nvmlDevice_t device, unsigned int *limit))             \
	X(nvmlDeviceGetTotalEnergyConsumption, (nvmlDevice_t device, unsigned long long *energy))  \
	X(nvmlDeviceGetUtilizationRates, (nvmlDevice_t device, nvmlUtilization_t * utilization))   \
	X(nvmlDeviceGetEncoderUtilization, (nvmlDevice_t device, unsigned int *utilization,        \
					    unsigned int *samplingPeriodUs))                       \
	X(nvmlDeviceGetDecoderUtilization, (nvmlDevice_t device, unsigned int *utilization,        \
					    unsigned int *samplingPeriodUs))                       \
	X(nvmlDeviceGetClockInfo, (nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)) \
	X(nvmlDeviceGetPcieReplayCounter, (nvmlDevice_t device, unsigned int *value))              \
	X(nvmlDeviceGetFieldValues, (nvmlDevice_t device, int valuesCount,                         \
				     nvmlFieldValue_t *values))                                    \
	X(nvmlDeviceGetSupportedEventTypes, (nvmlDevice_t device, unsigned long long *eventTypes)) \
	X(nvmlEventSetCreate, (nvmlEventSet_t * set))                                              \
	X(nvmlDeviceRegisterEvents, (nvmlDevice_t device, unsigned long long eventTypes,           \
				     nvmlEventSet_t set))                                          \
	X(nvmlEventSetWait_v2, (nvmlEventSet_t set, nvmlEventData_t * data, unsigned int timeoutms)) \
	X(nvmlEventSetWait, (nvmlEventSet_t set, nvmlEventData_t * data, unsigned int timeoutms))  \
	X(nvmlEventSetFree, (nvmlEventSet_t set))

/* Prototypes, so the simulator's definitions are checked against the ABI. */
#define NVML_DECLARE(name, params) nvmlReturn_t name params;
NVML_FUNCTIONS(NVML_DECLARE)
#undef NVML_DECLARE

/* Not part of the table: returns a string, not nvmlReturn_t. */
const char *nvmlErrorString(nvmlReturn_t result);

#endif
