package sandbox

// The sandbox's types and constants are the engine's (internal/engine),
// which has their documentation: named here, they are this package's API.
// TestEveryEngineNameExported fails when an exported name of the engine is
// missing here.

import "github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/engine"

type (
	Discovery          = engine.Discovery
	EndHost            = engine.EndHost
	Engine             = engine.Engine
	EngineHealth       = engine.EngineHealth
	Error              = engine.Error
	HealthReporter     = engine.HealthReporter
	Host               = engine.Host
	InProcess          = engine.InProcess
	LimitError         = engine.LimitError
	Limits             = engine.Limits
	LimitsReporter     = engine.LimitsReporter
	Location           = engine.Location
	LogHost            = engine.LogHost
	Logger             = engine.Logger
	Options            = engine.Options
	ParkHost           = engine.ParkHost
	PoolOptionError    = engine.PoolOptionError
	PoolOptions        = engine.PoolOptions
	Recorder           = engine.Recorder
	Request            = engine.Request
	Result             = engine.Result
	RuntimePoolOptions = engine.RuntimePoolOptions
	Sanitization       = engine.Sanitization
	ScriptError        = engine.ScriptError
	Stats              = engine.Stats
	Status             = engine.Status
	ToolCall           = engine.ToolCall
	ToolError          = engine.ToolError
	ToolInfo           = engine.ToolInfo
)

const (
	CodeAccessDenied              = engine.CodeAccessDenied
	CodeExecutionAborted          = engine.CodeExecutionAborted
	CodeExecutionError            = engine.CodeExecutionError
	CodeLimitExceeded             = engine.CodeLimitExceeded
	CodeMessageFlood              = engine.CodeMessageFlood
	CodeMessageInvalid            = engine.CodeMessageInvalid
	CodeMessageTooLarge           = engine.CodeMessageTooLarge
	CodePoolDisposed              = engine.CodePoolDisposed
	CodeQueueFull                 = engine.CodeQueueFull
	CodeQueueTimeout              = engine.CodeQueueTimeout
	CodeSelfReferenceBlocked      = engine.CodeSelfReferenceBlocked
	CodeSyntaxError               = engine.CodeSyntaxError
	CodeTimeout                   = engine.CodeTimeout
	CodeTooManyPendingCalls       = engine.CodeTooManyPendingCalls
	CodeToolExecutionError        = engine.CodeToolExecutionError
	CodeToolNotFound              = engine.CodeToolNotFound
	CodeValidationError           = engine.CodeValidationError
	CodeWorkerCrashed             = engine.CodeWorkerCrashed
	CodeWorkerLost                = engine.CodeWorkerLost
	CodeWorkerMemoryExceeded      = engine.CodeWorkerMemoryExceeded
	CodeWorkerStartupFailed       = engine.CodeWorkerStartupFailed
	CodeWorkerTimeout             = engine.CodeWorkerTimeout
	DeathAborted                  = engine.DeathAborted
	DeathCrash                    = engine.DeathCrash
	DeathMemory                   = engine.DeathMemory
	DeathProtocol                 = engine.DeathProtocol
	DeathRecycle                  = engine.DeathRecycle
	DeathScaleDown                = engine.DeathScaleDown
	DeathShutdown                 = engine.DeathShutdown
	DeathTimeout                  = engine.DeathTimeout
	DeathUnresponsive             = engine.DeathUnresponsive
	DefaultFloodInterval          = engine.DefaultFloodInterval
	DefaultFloodMessages          = engine.DefaultFloodMessages
	DefaultMaxExecutionsPerWorker = engine.DefaultMaxExecutionsPerWorker
	DefaultMaxMessageBytes        = engine.DefaultMaxMessageBytes
	DefaultMaxPendingCalls        = engine.DefaultMaxPendingCalls
	DefaultPoolMaxSize            = engine.DefaultPoolMaxSize
	DefaultPoolMinSize            = engine.DefaultPoolMinSize
	DefaultPreset                 = engine.DefaultPreset
	DefaultQueueSize              = engine.DefaultQueueSize
	DefaultQueueTimeout           = engine.DefaultQueueTimeout
	DefaultScaleDownThreshold     = engine.DefaultScaleDownThreshold
	DefaultScaleInterval          = engine.DefaultScaleInterval
	DefaultScaleUpThreshold       = engine.DefaultScaleUpThreshold
	DefaultSessionMemoryBytes     = engine.DefaultSessionMemoryBytes
	DefaultSessionsPerWorker      = engine.DefaultSessionsPerWorker
	DefaultSpareWorkers           = engine.DefaultSpareWorkers
	DefaultWatchdogGrace          = engine.DefaultWatchdogGrace
	DefaultWorkerStartupTimeout   = engine.DefaultWorkerStartupTimeout
	EngineInProcess               = engine.EngineInProcess
	EngineWorker                  = engine.EngineWorker
	KindIllegalBuiltinAccess      = engine.KindIllegalBuiltinAccess
	KindIllegalPropertyAccess     = engine.KindIllegalPropertyAccess
	KindIllegalSyntax             = engine.KindIllegalSyntax
	KindNestingTooDeep            = engine.KindNestingTooDeep
	KindReservedIdentifier        = engine.KindReservedIdentifier
	KindSelfReference             = engine.KindSelfReference
	KindSourceTooLarge            = engine.KindSourceTooLarge
	MaxContextDepth               = engine.MaxContextDepth
	MaxErrorBytes                 = engine.MaxErrorBytes
	MaxJSONDepth                  = engine.MaxJSONDepth
	MaxToolNameBytes              = engine.MaxToolNameBytes
	PresetBalanced                = engine.PresetBalanced
	PresetExperimental            = engine.PresetExperimental
	PresetLockedDown              = engine.PresetLockedDown
	PresetSecure                  = engine.PresetSecure
	StatusIllegalAccess           = engine.StatusIllegalAccess
	StatusOK                      = engine.StatusOK
	StatusRuntimeError            = engine.StatusRuntimeError
	StatusSyntaxError             = engine.StatusSyntaxError
	StatusTimeout                 = engine.StatusTimeout
	StatusToolError               = engine.StatusToolError
	WaitAborted                   = engine.WaitAborted
	WaitAcquired                  = engine.WaitAcquired
	WaitQueueTimeout              = engine.WaitQueueTimeout
	WorkerCommandName             = engine.WorkerCommandName
)
