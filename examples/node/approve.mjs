// A declared tool's target (docs/step-protocol.md): an AWS Lambda handler (Node.js) that asks
// for approval before a deployment, then deploys in two steps.
const text = (t) => ({ content: [{ type: "text", text: t }] });

export const handler = async (event) => {
  const { service, env } = event.arguments;
  const approval = event.input.approve;
  if (!approval) {
    const ask = {
      method: "elicitation/create",
      params: {
        mode: "form",
        message: `Deploy ${service} to ${env}?`,
        requestedSchema: { type: "object", properties: { note: { type: "string" } } },
      },
    };
    return { input: { requests: { approve: ask }, checkpoint: { stage: "asked" } } };
  }
  if (approval.action !== "accept") return { error: `Deploying ${service} was not approved.` };
  if (event.checkpoint.stage === "asked") {
    const progress = { progress: 1, total: 2, message: `deploying ${service}` };
    return { continue: { checkpoint: { stage: "deployed" }, progress } };
  }
  const note = approval.content?.note ? ` (${approval.content.note})` : "";
  return { done: text(`Deployed ${service} to ${env}${note}.`) };
};
