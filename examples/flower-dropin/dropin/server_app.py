"""dropin: a Flower ServerApp."""

import json

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Bulyan, MultiKrum
from reshuffle.errors import ConfigError
from reshuffle.flower import ReshuffleGrid

from dropin.task import Net, load_data, test

# Create ServerApp
app = ServerApp()


def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Evaluate the global model on the test set."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    _, testloader = load_data(0, 1)
    loss, accuracy = test(model, testloader, "cpu")
    return MetricRecord({"accuracy": accuracy, "loss": loss})


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    num_rounds = context.run_config["num-server-rounds"]
    lr = context.run_config["lr"]
    f = context.run_config["num-malicious-nodes"]
    torch.manual_seed(0)
    arrays = ArrayRecord(Net().state_dict())

    name = context.run_config["strategy"]
    if name not in ("multikrum", "bulyan"):
        # The project's ConfigError: `python -m reshuffle.flower.app.local flwr run` shows it as one line.
        raise ConfigError(f"strategy {name!r}: this app runs 'multikrum' or 'bulyan'")
    if name == "bulyan":
        strategy = Bulyan(fraction_train=context.run_config["fraction-train"], num_malicious_nodes=f)
    else:
        strategy = MultiKrum(fraction_train=context.run_config["fraction-train"], num_malicious_nodes=f,
                             num_nodes_to_select=3)

    result = strategy.start(
        grid=ReshuffleGrid(grid),
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=central_evaluate,
    )

    print("\nSaving final model and results to disk...")
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
    accuracy = {r: dict(m) for r, m in result.evaluate_metrics_serverapp.items()}
    with open("results.json", "w") as fh:
        json.dump({"accuracy": accuracy}, fh, indent=2)
