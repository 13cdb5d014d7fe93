// The API's objects the TypeScript SDK (sdk/typescript) already defines in their wire shape:
// one definition for both (type-only: nothing of the SDK is bundled). The rest are in api.ts
// (the SDK turns those into its own models).
export type { AuditEntry, Usage, UsageItem } from "../../sdk/typescript/src/client.js";
export type { FunctionInfo as Fn, FunctionRun as FnRun, FunctionVersion as FnVersion, Schedule, ScheduleRun } from "../../sdk/typescript/src/functions.js";
export type { Database, DatabaseConnection } from "../../sdk/typescript/src/databases.js";
export type { App, AppBuild, AppPlan, Deployment, GitHubHook } from "../../sdk/typescript/src/apps.js";
